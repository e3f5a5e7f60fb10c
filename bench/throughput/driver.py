"""Drives the embedded stack: publishes requests, follows their records, splits their time."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.throughput.loads import Call
from bench.throughput.stats import latency_dict
from bench.throughput.workload import MAX_TOKENS, PROMPT

if TYPE_CHECKING:  # imported where used: `switchyard` imports this module at every start
    from app.client import RequestPublisher, TopicFollower
    from app.embedded.stack import EmbeddedStack


@dataclass
class Trace:
    """One request through the stack: wall-clock times (epoch s) and record timestamps."""

    request_id: str = ""
    published: float = 0.0
    #: ``CreateTime`` of its first decision, outcome(s) and response records (epoch s).
    decision_at: float | None = None
    outcome_at: float | None = None
    response_at: float | None = None
    received: float | None = None
    provider_ms: float = 0.0
    outcomes: int = 0
    e2e_ms: float | None = None


#: Stages of a one-attempt request, as differences of the record timestamps.
STAGES = (
    "publish → decision (requests hop, ingest, routing hop, router)",
    "decision → outcome, less the call (below 0: the call started ahead of its decision)",
    "provider call (the mock, client side)",
    "outcome → response (the executor publishes a success itself)",
    "response → client (responses hop)",
)


def stage_breakdown(traces: Sequence[Trace]) -> dict[str, list[float]]:
    """Milliseconds per stage for the answered one-attempt requests of ``traces``.

    Record timestamps are the producer's ``CreateTime`` (ms resolution), on the same
    machine as the driver's clock, so the stages add up to the end-to-end time.
    """
    stages: dict[str, list[float]] = {name: [] for name in STAGES}
    for t in traces:
        if t.outcomes != 1 or None in (t.decision_at, t.outcome_at, t.response_at, t.received):
            continue
        assert t.decision_at is not None and t.outcome_at is not None
        assert t.response_at is not None and t.received is not None
        values = (
            t.decision_at - t.published,
            t.outcome_at - t.decision_at - t.provider_ms / 1000.0,
            t.provider_ms / 1000.0,
            t.response_at - t.outcome_at,
            t.received - t.response_at,
        )
        for name, value in zip(STAGES, values, strict=True):
            stages[name].append(value * 1000.0)
    return stages


class StackDriver:
    """Publishes requests and resolves each with its ``llm.responses`` record; follows the
    decisions and outcomes too, to split each request's time into stages."""

    def __init__(self, stack: EmbeddedStack) -> None:
        self.stack = stack
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.traces: dict[str, Trace] = {}
        self._publisher: RequestPublisher | None = None
        self._follower: TopicFollower | None = None
        self._reader: asyncio.Task[None] | None = None
        self._count = 0

    async def start(self) -> StackDriver:
        from app.client import RequestPublisher, TopicFollower

        topics = self.stack.topics
        bootstrap = self.stack.broker.bootstrap
        self._publisher = await RequestPublisher(bootstrap, topics.requests).start()
        self._follower = await TopicFollower(
            bootstrap, [topics.responses, topics.outcomes, topics.decisions]
        ).start()
        self._reader = asyncio.create_task(self._read())
        return self

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._publisher is not None:
            await self._publisher.stop()
        if self._follower is not None:
            await self._follower.stop()

    async def _read(self) -> None:
        assert self._follower is not None
        topics = self.stack.topics
        while True:
            records = await self._follower.poll(timeout_ms=100)
            now = time.time()
            for record in records:
                value = json.loads(record.value or b"{}")
                trace = self.traces.get(value.get("request_id", ""))
                if trace is None:
                    continue
                stamp = record.timestamp / 1000.0
                if record.topic == topics.responses:
                    if trace.response_at is None:
                        trace.response_at, trace.received = stamp, now
                    future = self.pending.get(value["request_id"])
                    if future is not None and not future.done():
                        future.set_result(value)
                elif record.topic == topics.outcomes:
                    trace.outcomes += 1
                    trace.outcome_at = trace.outcome_at or stamp
                    trace.provider_ms += float(value.get("latency_ms", 0.0))
                elif value.get("attempt") == 1:
                    trace.decision_at = stamp

    def call(self, route: str) -> Call:
        async def call() -> None:
            assert self._publisher is not None
            self._count += 1
            request_id = f"bench-{self._count:07d}"
            future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            self.pending[request_id] = future
            trace = self.traces[request_id] = Trace(request_id, published=time.time())
            started = time.perf_counter()
            try:
                await self._publisher.publish(
                    {
                        "request_id": request_id,
                        "model": route,
                        "messages": [{"role": "user", "content": PROMPT}],
                        "max_tokens": MAX_TOKENS,
                    }
                )
                response = await future
            finally:
                self.pending.pop(request_id, None)
            trace.e2e_ms = (time.perf_counter() - started) * 1000.0
            if response.get("status") != "ok":
                raise RuntimeError(f"error response: {json.dumps(response.get('error'))[:160]}")

        return call

    def since(self, mark: int) -> list[Trace]:
        """The traces of the requests issued after ``issued`` was ``mark``."""
        return [self.traces[f"bench-{n:07d}"] for n in range(mark + 1, self._count + 1)]

    def added_ms(self, mark: int) -> list[float]:
        """End-to-end minus the request's own provider call time (every attempt)."""
        return [
            t.e2e_ms - t.provider_ms
            for t in self.since(mark)
            if t.e2e_ms is not None and t.outcomes
        ]

    def stages(self, mark: int) -> dict[str, dict[str, float] | None]:
        return {k: latency_dict(v) for k, v in stage_breakdown(self.since(mark)).items()}

    @property
    def issued(self) -> int:
        return self._count
