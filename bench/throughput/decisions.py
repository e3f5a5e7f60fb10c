"""The decision function alone: ``handle`` per strategy, and the router's per-event codec path."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.throughput.report import decision_target
from bench.throughput.stats import latency_dict, percentile
from bench.throughput.workload import MAX_TOKENS, PROMPT

if TYPE_CHECKING:  # imported where used: `switchyard` imports this module at every start
    from app.contract import RequestAccepted
    from app.routing.policy import Policy
    from app.routing.state import RouteState


def bench_policy(strategy: str, providers: int = 16) -> Policy:
    from app.config.schema import parse_config
    from app.routing.params import RoutingParams
    from app.routing.policy import Policy

    ids = [f"prov{i:02d}-bench" for i in range(providers)]
    config = {
        "providers": [
            {
                "id": pid,
                "base_url": f"https://{pid}.example.test/v1",
                "cost_per_mtok_input": 0.2 + 0.35 * i,
                "cost_per_mtok_output": 0.6 + 1.05 * i,
                "p95_latency_baseline_ms": 800.0 + 90.0 * i,
                "models": [{"name": "m1"}],
            }
            for i, pid in enumerate(ids)
        ],
        "routes": {"chat": {"providers": ids}},
        "default_route": "chat",
    }
    params = RoutingParams(BANDIT_STRATEGY=strategy)  # type: ignore[call-arg]
    return Policy(parse_config(config, env={}), params)


T0 = 1_700_000_000.0


def bench_state(policy: Policy, open_attempts: int) -> RouteState:
    """A route that has run a while: every arm pulled, some in flight, breakers closed."""
    from app.routing.state import ArmState, OpenAttempt, RouteState

    arms = {}
    deployments = [arm.deployment for arm in policy.arms("chat")]
    for i, deployment in enumerate(deployments):
        pulls = 150 + 37 * i
        successes = round(pulls * (0.80 + 0.012 * i))
        arms[deployment] = ArmState(
            pulls=pulls,
            total_reward=float(successes),
            alpha=1.0 + successes,
            beta=1.0 + pulls - successes,
            avg_latency_s=0.4 + 0.05 * i,
            latency_samples=pulls,
            ewma_failure=0.05 + 0.01 * i,
            ewma_latency_ms=400.0 + 50.0 * i,
            observations=pulls,
        )
    attempts = {}
    for n in range(open_attempts):
        deployment = deployments[n % len(deployments)]
        attempts[f"open-{n:05d}#1"] = OpenAttempt(
            deployment=deployment, decided_at=T0 - 1.0, deadline=T0 + 119.0
        )
        arms[deployment] = replace(arms[deployment], in_flight=arms[deployment].in_flight + 1)
    return RouteState(
        clock=T0,
        position=10_000,
        arms=arms,
        open_attempts=attempts,
        accepted_through={f"llm.requests:{p}": 2_500 for p in range(4)},
    )


def bench_requests(policy: Policy, count: int) -> list[RequestAccepted]:
    from datetime import UTC, datetime

    from bench.ingested import admitted, ingest

    prompts = (
        PROMPT,
        "Write a Python function that checks whether a string is a palindrome.",
        "Traduis en anglais : le routeur choisit le meilleur fournisseur.",
        "Explain step by step why the sky is blue.",
    )
    events = []
    for n in range(count):
        body = {
            "request_id": f"decide-{n:06d}",
            "model": "chat",
            "messages": [{"role": "user", "content": prompts[n % len(prompts)]}],
            "max_tokens": MAX_TOKENS,
        }
        when = datetime.fromtimestamp(T0 + n * 0.001, tz=UTC)
        events.append(admitted(ingest(body, 3_000 + n, when, policy.config, partition=n % 4)))
    return events


def _time_decisions(work: Callable[[int], object], count: int, max_seconds: float) -> list[float]:
    return _time_decisions_with_cpu(work, count, max_seconds)[0]


def _time_decisions_with_cpu(
    work: Callable[[int], object], count: int, max_seconds: float
) -> tuple[list[float], list[float]]:
    """Each call's wall time, and its thread's CPU time (µs): what it cost the process
    without the time the machine gave to others (a shared VM's tail). The CPU clock is
    read outside the wall interval, so reading it adds nothing to the wall times."""
    import gc

    gc.collect()
    wall, cpu = [], []
    deadline = time.perf_counter() + max_seconds
    for n in range(count):
        started_cpu = time.thread_time_ns()
        started = time.perf_counter_ns()
        work(n)
        ended = time.perf_counter_ns()
        cpu.append((time.thread_time_ns() - started_cpu) / 1000.0)
        wall.append((ended - started) / 1000.0)
        if time.perf_counter() > deadline:
            break
    return wall, cpu


def _top_costs(work: Callable[[int], object], count: int) -> list[dict[str, Any]]:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for n in range(count):
        work(n)
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{name} ({Path(filename).name}:{line})",
                "calls_per_decision": calls / count,
                "self_us_per_decision": tottime * 1e6 / count,
                "cum_us_per_decision": cumtime * 1e6 / count,
            }
        )
    rows.sort(key=lambda row: row["self_us_per_decision"], reverse=True)
    return rows[:12]


def run_decisions(args: argparse.Namespace) -> dict[str, Any]:
    """p50/p99 of ``handle`` per strategy, and the router's whole per-event codec path."""
    from app.routing.fold import handle
    from app.routing.propensity import forget_propensities

    results: dict[str, Any] = {}
    for strategy in ("ucb1", "thompson", "composite", "adaptive"):
        policy = bench_policy(strategy)
        state = bench_state(policy, open_attempts=0)
        events = bench_requests(policy, min(args.decisions, 20_000))

        def decide(
            n: int, state: RouteState = state, events: list[Any] = events, policy: Policy = policy
        ) -> object:
            # The state never changes here: without this, thompson's propensity would be
            # integrated for its first few decisions only, then read from its cache.
            forget_propensities()
            step = handle(state, events[n % len(events)], state.position + 1 + n, policy)
            return step

        check = handle(state, events[0], state.position + 1, policy)
        assert check.dispatches, "the bench decision dispatched nothing"
        candidates = len(check.dispatches[0].decision.candidates)
        timings, cpu = _time_decisions_with_cpu(decide, args.decisions, args.decision_seconds)
        entry: dict[str, Any] = {
            "candidates": candidates,
            "rule": check.dispatches[0].decision.selection_rule,
            "latency_us": latency_dict(timings),
            "cpu_us": latency_dict(cpu),
        }
        if percentile(timings, 0.99) > decision_target(strategy):
            # cProfile triples the cost: profile about two seconds' worth of decisions.
            mean_s = sum(timings) / len(timings) / 1e6
            entry["top_costs"] = _top_costs(decide, max(20, min(1000, int(2.0 / mean_s))))
        results[strategy] = entry
    results["router_event_ucb1"] = _codec_path(args)
    return results


def _codec_path(args: argparse.Namespace) -> dict[str, Any]:
    """What the router agent does per request besides Faust: parse the routing-log record,
    load the row from its JSON, fold, dump the row, dump the decision and the dispatch."""
    from pydantic import TypeAdapter

    from app.contract import RoutingLogEvent
    from app.routing.fold import handle
    from app.routing.rows import dumps, loads

    adapter: TypeAdapter[RoutingLogEvent] = TypeAdapter(RoutingLogEvent)
    policy = bench_policy("ucb1")
    out: dict[str, Any] = {}
    for open_attempts in (0, args.concurrency):
        state = bench_state(policy, open_attempts)
        row = dumps(state)
        events = [e.model_dump_json().encode() for e in bench_requests(policy, 2000)]

        def event_path(
            n: int, row: bytes = row, events: list[bytes] = events, base: int = state.position
        ) -> object:
            parsed = adapter.validate_json(events[n % len(events)])
            loaded = loads(row)
            step = handle(loaded, parsed, base + 1 + n, policy)
            written = dumps(step.state)
            sent = [(d.decision.model_dump_json(), d.model_dump_json()) for d in step.dispatches]
            return written, sent

        timings = _time_decisions(event_path, min(args.decisions, 5000), args.decision_seconds / 2)
        out[f"open_attempts_{open_attempts}"] = {
            "row_bytes": len(row),
            "latency_us": latency_dict(timings),
        }
    return out
