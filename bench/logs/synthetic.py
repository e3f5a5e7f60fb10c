"""A recorded log made without a broker: the live fold against simulated providers.

For the replay tests and ``bench/replay_speed.py``. A small discrete-event
simulation does what the worker does: requests arrive at a fixed interval and
go on the routing log; each event on the log is folded at once with
:func:`app.routing.fold.handle` at its offset; each dispatched attempt finishes
after its simulated latency (counted from its ``not_before``, the retry backoff)
with an outcome drawn from its deployment's :class:`Profile` (seeded), which
goes on the routing log as ``AttemptFinished``
(with ``retry`` when it failed in a retriable way and attempts remain, and the
completion when it succeeded). The router's responses come from the fold. Every
record is serialised to JSON and parsed back, as it would be on a broker.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.audit.log import Entry, RecordedLog, RoutingEvent, parse
from app.config.providers import ProviderConfig
from app.contract import (
    ChatMessage,
    ChatRequest,
    Dispatch,
    LogPosition,
    RequestAccepted,
    StatusClass,
    derived_id,
    route_of,
)
from app.execution.outcome import CallResult, finish
from app.routing.bandit import seeded_rng
from app.routing.driver import Driver
from app.routing.fold import at, epoch
from app.routing.keys import KeyState
from app.routing.policy import Policy

#: 2023-11-14T22:13:20Z, as in the tests.
T0 = 1_700_000_000.0
COMPLETION: dict[str, Any] = {
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "synthetic answer"}}],
}
_HTTP = {
    StatusClass.SUCCESS: 200,
    StatusClass.SERVER_ERROR: 503,
    StatusClass.RATE_LIMITED: 429,
    StatusClass.CLIENT_ERROR: 400,
    StatusClass.AUTH_ERROR: 401,
    StatusClass.BAD_RESPONSE: 200,
}


def provider(pid: str, cost: float, **extra: int) -> ProviderConfig:
    """Provider ``pid`` with one model, ``m1``, at ``cost`` dollars per million input tokens
    (three times that per million output tokens); ``extra``: more of its settings."""
    return ProviderConfig.model_validate(
        {
            "id": pid,
            "base_url": f"https://{pid}.example.test/v1",
            "models": [{"name": "m1"}],
            "cost_per_mtok_input": cost,
            "cost_per_mtok_output": 3 * cost,
            **extra,
        }
    )


@dataclass(frozen=True)
class Profile:
    """How a simulated deployment behaves."""

    success: float = 0.95
    latency_ms: float = 800.0
    #: Latency is uniform in ``latency_ms * [1 - jitter, 1 + jitter]``.
    jitter: float = 0.5
    failure: StatusClass = StatusClass.SERVER_ERROR
    tokens_in: int = 40
    tokens_out: int = 120


def accepted(request_id: str, t: float, route: str, offset: int) -> RequestAccepted:
    content = f"synthetic prompt {offset % 7}"
    return RequestAccepted(
        id=derived_id("accepted", request_id),
        occurred_at=at(t),
        request=ChatRequest(
            request_id=request_id,
            model=route,
            messages=[ChatMessage(role="user", content=content)],
        ),
        route=route,
        prompt_sha256=hashlib.sha256(content.encode()).hexdigest(),
        prompt_chars=len(content),
        source=LogPosition(topic="llm.requests", partition=0, offset=offset),
    )


class _Simulation:
    def __init__(self, policy: Policy, profiles: Mapping[str, Profile], seed: int) -> None:
        self.policy = policy
        self.profiles = profiles
        self.seed = seed
        self.log = RecordedLog(source=f"synthetic seed {seed}")
        self.states: dict[str, KeyState] = {}
        self.driver = Driver(lambda: policy, states=self.states)
        self.partition = {route: i for i, route in enumerate(policy.config.route_names())}
        self.offsets: dict[int, int] = {}
        self.queue: list[tuple[float, int, RoutingEvent]] = []
        self.sequence = 0

    def schedule(self, t: float, event: RoutingEvent) -> None:
        self.sequence += 1
        heapq.heappush(self.queue, (t, self.sequence, event))

    def run(self) -> RecordedLog:
        while self.queue:
            t, _, event = heapq.heappop(self.queue)
            self.append(event, t)
        self.log.routing_start = {p: 0 for p in self.offsets}
        return self.log.sort()

    def append(self, event: RoutingEvent, t: float) -> None:
        """Put the event on the routing log, fold it, publish what the router returns (the
        routing-log records it sends — budget asks, forwarded requests — come next)."""
        route = route_of(event)
        partition = self.partition.get(route, 0)
        offset = self.offsets.get(partition, 0)
        self.offsets[partition] = offset + 1
        entry: Entry[RoutingEvent] = parse("routing", partition, offset, event.model_dump_json())
        assert entry.event is not None
        self.log.routing.append(entry)
        step = self.driver.fold(entry.event, offset)
        for record in step.records:
            self.schedule(t, record)
        for dispatch in step.dispatches:
            self.record("decisions", dispatch.decision.model_dump_json())
            self.execute(dispatch)
        for decision in step.decisions:  # answered from the response cache
            self.record("decisions", decision.model_dump_json())
        for response in step.responses:
            self.record("responses", response.model_dump_json())

    def record(self, stream: str, raw: str) -> None:
        entries = self.log.stream(stream)
        entries.append(parse(stream, 0, len(entries), raw))

    def execute(self, dispatch: Dispatch) -> None:
        decision = dispatch.decision
        profile = self.profiles.get(decision.deployment, Profile())
        rng = seeded_rng("synthetic", self.seed, decision.request_id, decision.attempt)
        ok = rng.random() < profile.success
        status = StatusClass.SUCCESS if ok else profile.failure
        latency_ms = profile.latency_ms * (1.0 + profile.jitter * (2.0 * rng.random() - 1.0))
        tokens_in, tokens_out = (profile.tokens_in, profile.tokens_out) if ok else (0, 0)
        # Exactly what the executor would make of such a call.
        result = CallResult(
            status,
            _HTTP.get(status),
            latency_ms,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            finish_reason="stop" if ok else None,
            completion=COMPLETION if ok else None,
            error=None if ok else status.value,
        )
        provider = self.policy.config.provider_by_id[decision.provider]
        done = max(epoch(decision.occurred_at), dispatch.not_before) + latency_ms / 1000.0
        outcome, finished = finish(dispatch, result, provider, occurred_at=at(done))
        self.record("outcomes", outcome.model_dump_json())
        self.schedule(done, finished)


def synthetic_log(
    policy: Policy,
    profiles: Mapping[str, Profile],
    requests: int,
    *,
    seed: int = 0,
    interval_s: float = 0.05,
    start: float = T0,
) -> RecordedLog:
    """``requests`` requests, one every ``interval_s``, spread over the policy's routes."""
    simulation = _Simulation(policy, profiles, seed)
    routes = policy.config.route_names()
    for i in range(requests):
        t = start + i * interval_s
        simulation.schedule(t, accepted(f"req-{seed}-{i:06d}", t, routes[i % len(routes)], i))
    return simulation.run()
