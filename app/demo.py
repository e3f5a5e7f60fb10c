"""``switchyard demo``: the whole path on the embedded stack, with a summary at the end.

Its requests show every feature of the stack's providers file: ``model: "auto"``,
conversations whose prompts the providers cache (and affinity follows), a tenant's budget
and dynamic route (app/demo_showcase.py); the summary says what each did. With
``--local-model`` it sends short one-shot prompts instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.client import RequestPublisher, TopicFollower
from app.demo_showcase import Features, read_budgets, render_features, showcase_request
from app.embedded.brokers import BrokerKind
from app.embedded.local_providers import LocalModelChoice, local_stack
from app.embedded.stack import EmbeddedStack
from app.settings import Topics

PROMPTS = (
    "Summarise the attached meeting notes in three bullet points.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Traduis en anglais : le routeur choisit le meilleur fournisseur.",
    "Explain step by step why the sky is blue.",
    "Classify this review as positive or negative: the delivery was late.",
)


@dataclass
class Tally:
    sent_at: dict[str, float] = field(default_factory=dict)
    answered_at: dict[str, float] = field(default_factory=dict)
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    provider_ms: Counter[str] = field(default_factory=Counter)
    cost_usd: float = 0.0
    attempts: int = 0
    features: Features = field(default_factory=Features)

    def take(self, topic: str, value: dict[str, Any], now: float, topics: Topics) -> None:
        """Fold one record of the responses, outcomes or decisions topic into the tally."""
        request_id = value.get("request_id", "")
        if request_id not in self.sent_at:
            return  # not ours (an earlier run on the same broker)
        if topic == topics.responses and request_id not in self.responses:
            self.responses[request_id] = value
            self.answered_at[request_id] = now
        elif topic == topics.outcomes:
            self.provider_ms[request_id] += value["latency_ms"]
            self.cost_usd += value["cost_usd"]
            self.attempts += 1
            self.features.take_outcome(value)
        elif topic == topics.decisions:
            self.features.take_decision(value)


@dataclass(frozen=True)
class Summary:
    requests: int
    answered: int
    ok: int
    errors: int
    attempts: int
    share: dict[str, float]
    throughput_rps: float
    e2e_p50_ms: float
    e2e_p95_ms: float
    added_p50_ms: float
    added_p95_ms: float
    total_cost_usd: float
    #: What the features did (app/demo_showcase.py): the auto router's picks by model, the
    #: share of input tokens read from prompt caches, of decisions that followed an
    #: affinity pin, each budget's ledger, the dynamic routes' hits by graph/branch.
    auto_picks: dict[str, int] = field(default_factory=dict)
    cache_hit_rate: float = 0.0
    affinity_share: float = 0.0
    budgets: dict[str, dict[str, Any]] = field(default_factory=dict)
    dynamic_hits: dict[str, int] = field(default_factory=dict)


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (percentiles, inclusive); 0 when there are none."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def summarise(tally: Tally, requests: int) -> Summary:
    answered = list(tally.responses)
    ok = [r for r in answered if tally.responses[r]["status"] == "ok"]
    share_counts = Counter(tally.responses[r]["deployment"] for r in ok)
    e2e = [(tally.answered_at[r] - tally.sent_at[r]) * 1000 for r in answered]
    added = [
        (tally.answered_at[r] - tally.sent_at[r]) * 1000 - tally.provider_ms[r] for r in answered
    ]
    span = max(tally.answered_at.values(), default=0.0) - min(tally.sent_at.values(), default=0.0)
    return Summary(
        requests=requests,
        answered=len(answered),
        ok=len(ok),
        errors=len(answered) - len(ok),
        attempts=tally.attempts,
        share={d: n / len(ok) for d, n in sorted(share_counts.items())} if ok else {},
        throughput_rps=len(answered) / span if span > 0 else 0.0,
        e2e_p50_ms=quantile(e2e, 0.50),
        e2e_p95_ms=quantile(e2e, 0.95),
        added_p50_ms=quantile(added, 0.50),
        added_p95_ms=quantile(added, 0.95),
        total_cost_usd=tally.cost_usd,
        auto_picks=dict(sorted(tally.features.auto_picks.items())),
        cache_hit_rate=tally.features.cache_hit_rate,
        affinity_share=tally.features.affinity_share,
        budgets=tally.features.budgets,
        dynamic_hits=dict(sorted(tally.features.dynamic_hits.items())),
    )


def render(summary: Summary) -> str:
    lines = [
        f"requests   {summary.requests}   answered {summary.answered}   ok {summary.ok}   "
        f"errors {summary.errors}   attempts {summary.attempts}",
        f"throughput {summary.throughput_rps:.1f} requests/s",
        f"latency    end-to-end p50 {summary.e2e_p50_ms:.0f} ms  p95 {summary.e2e_p95_ms:.0f} ms",
        f"           added by Switchyard p50 {summary.added_p50_ms:.1f} ms  "
        f"p95 {summary.added_p95_ms:.1f} ms",
        f"cost       ${summary.total_cost_usd:.4f}",
        "share per deployment:",
        *(f"  {d:<40} {s:6.1%}" for d, s in summary.share.items()),
    ]
    shown = render_features(
        summary.auto_picks,
        summary.cache_hit_rate,
        summary.affinity_share,
        summary.budgets,
        summary.dynamic_hits,
    )
    return "\n".join(lines + shown)


async def _publish(
    publisher: RequestPublisher, tally: Tally, count: int, rate: float, showcase: bool
) -> None:
    start = time.monotonic()
    for i in range(count):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        request_id = f"demo-{i:06d}"
        tally.sent_at[request_id] = time.monotonic()
        plain = {"model": "chat", "messages": [{"role": "user", "content": PROMPTS[i % 5]}]}
        asked = showcase_request(i) if showcase else plain
        await publisher.publish({"request_id": request_id, **asked, "max_tokens": 250})
    await publisher.flush()


async def _collect(
    follower: TopicFollower, tally: Tally, count: int, deadline: float, topics: Topics
) -> None:
    last_report = time.monotonic()
    while len(tally.responses) < count and time.monotonic() < deadline:
        for record in await follower.poll():
            tally.take(record.topic, json.loads(record.value or b"{}"), time.monotonic(), topics)
        if time.monotonic() - last_report >= 1.0:
            last_report = time.monotonic()
            print(f"  answered {len(tally.responses)}/{count}", file=sys.stderr, flush=True)
    # Outcomes of the last responses may trail them by a moment.
    for record in await follower.poll(timeout_ms=300):
        tally.take(record.topic, json.loads(record.value or b"{}"), time.monotonic(), topics)


async def _warm_up(
    publisher: RequestPublisher, follower: TopicFollower, topics: Topics, deadline: float
) -> None:
    """Wait until the worker answers one request, so the numbers exclude its start-up."""
    started = time.monotonic()
    await publisher.publish(
        {"request_id": "demo-warm-up", "messages": [{"role": "user", "content": "ping"}]}
    )
    await publisher.flush()
    while time.monotonic() < deadline:
        for record in await follower.poll():
            if record.topic == topics.responses and b'"demo-warm-up"' in (record.value or b""):
                waited = time.monotonic() - started
                print(f"worker ready after {waited:.1f} s", file=sys.stderr)
                return
    raise TimeoutError("the worker did not answer the warm-up request")


async def _export(stack: EmbeddedStack, directory: Path) -> None:
    """Keep the log: the embedded broker is memory-only and goes away with the demo."""
    from app.audit.export import write_export, write_policy
    from app.audit.log import read_broker
    from app.policy.files import load_config
    from app.routing.params import params_from_env
    from app.routing.policy import Policy

    log = await read_broker(stack.broker.bootstrap, stack.topics)
    write_export(log, directory, stack.topics)
    # The worker's routing settings: this environment plus what the stack passed it.
    params = params_from_env({**os.environ, **stack.extra_env})
    write_policy(Policy(load_config(stack.providers_file, env={}), params), directory)
    print(f"exported the log to {directory}", file=sys.stderr)


async def run_demo(
    requests: int,
    rate: float,
    seed: int,
    timeout_s: float,
    env: dict[str, str] | None = None,
    export: Path | None = None,
    local: LocalModelChoice | None = None,
    broker: BrokerKind = "tansu",
) -> Summary:
    print(
        f"starting the embedded broker ({broker}), simulated providers and a worker ...",
        file=sys.stderr,
    )
    models, providers_yaml = local_stack(local) if local is not None else ([], None)
    if local is not None:
        print(f"local model first: kept at confidence >= {local.threshold:g}", file=sys.stderr)
    async with EmbeddedStack(
        seed=seed, env=env, local_models=models, providers_yaml=providers_yaml, broker_kind=broker
    ) as stack:
        topics = stack.topics
        publisher = await RequestPublisher(stack.broker.bootstrap, topics.requests).start()
        follower = await TopicFollower(
            stack.broker.bootstrap, [topics.responses, topics.outcomes, topics.decisions]
        ).start()
        tally = Tally()
        try:
            deadline = time.monotonic() + timeout_s
            await _warm_up(publisher, follower, topics, deadline)
            print(f"publishing {requests} requests at {rate:g}/s", file=sys.stderr)
            await asyncio.gather(
                _publish(publisher, tally, requests, rate, showcase=local is None),
                _collect(follower, tally, requests, deadline, topics),
            )
            tally.features.budgets = await read_budgets(stack)
        finally:
            await publisher.stop()
            await follower.stop()
        if export is not None:
            await _export(stack, export)
    return summarise(tally, requests)


def main(
    requests: int,
    rate: float,
    seed: int,
    as_json: bool,
    timeout_s: float,
    strategy: str | None = None,
    export: Path | None = None,
    local: LocalModelChoice | None = None,
    broker: BrokerKind = "tansu",
) -> int:
    env = {"BANDIT_STRATEGY": strategy} if strategy else None
    summary = asyncio.run(run_demo(requests, rate, seed, timeout_s, env, export, local, broker))
    print(render(summary))
    if as_json:
        print(json.dumps(asdict(summary), sort_keys=True))
    return 0 if summary.answered == summary.requests else 1
