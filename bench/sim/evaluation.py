"""Every (scenario, policy) cell of a quality benchmark, and the result document.

Cells run in parallel processes and are assembled in a fixed order, so the
document is a function of (scenarios, policies, requests, seed) alone.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from app.routing.policy import Policy
from bench.sim import policies, scenarios
from bench.sim.engine import RunResult, simulate
from bench.sim.policies import Resolved
from bench.sim.routers import routing_params
from bench.sim.scenarios import DURATION_S, ROUTE
from bench.sim.world import FAILURE_PENALTY, LAMBDA_COST, LAMBDA_LATENCY, Scenario

#: Points of the cumulative regret curve kept in the JSON.
CURVE_POINTS = 100


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=1, allow_nan=False) + "\n"


def _cell(scenario_id: str, policy: str, requests: int, seed: int) -> tuple[RunResult, float]:
    started = time.perf_counter()
    result = simulate(scenarios.build(scenario_id), policy, requests, seed)
    return result, time.perf_counter() - started


def _cost_rank(cell: tuple[str, str]) -> tuple[int, int]:
    """Slowest first, for load balancing: Thompson's propensity, then arm count."""
    scenario_id, policy = cell
    arms = len(scenarios.build(scenario_id).config.providers)
    return (-("thompson" in policy), -arms)


def evaluate(
    scenario_ids: Sequence[str],
    policy_names: Sequence[str],
    requests: int,
    seed: int,
    jobs: int = 1,
    *,
    log: bool = False,
) -> dict[str, Any]:
    """Run every cell and assemble the result document (see the README for its fields)."""
    if requests < 1:
        raise ValueError("--requests must be >= 1")
    built = {sid: scenarios.build(sid) for sid in scenario_ids}
    resolved = policies.resolve(policy_names)
    for name, reason in resolved.skipped:
        print(f"skipped policy {name}: {reason}", file=sys.stderr)
    cells = sorted(((s, p) for s in built for p in resolved.names), key=_cost_rank)
    results: dict[tuple[str, str], tuple[RunResult, float]] = {}
    if jobs <= 1:
        for cell in cells:
            results[cell] = _cell(*cell, requests, seed)
            _progress(log, cell, results[cell][1])
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_cell, *cell, requests, seed): cell for cell in cells}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                _progress(log, futures[future], results[futures[future]][1])
    return _document(built, resolved, {k: v[0] for k, v in results.items()}, requests, seed)


def _progress(log: bool, cell: tuple[str, str], seconds: float) -> None:
    if log:
        print(f"  {cell[0]} {cell[1]}: {seconds:.1f} s", file=sys.stderr, flush=True)


def _document(
    built: dict[str, Scenario],
    resolved: Resolved,
    results: dict[tuple[str, str], RunResult],
    requests: int,
    seed: int,
) -> dict[str, Any]:
    scenarios_out = []
    for sid, scenario in built.items():
        oracle = results[(sid, policies.ORACLE)]
        incident = scenario.incident
        scenarios_out.append(
            {
                "id": sid,
                "title": scenario.title,
                "description": scenario.description,
                "deployments": _arms(scenario),
                "changes": [
                    {"kind": type(change).__name__, **dataclasses.asdict(change)}
                    for change in (*scenario.changes, *scenario.throttles)
                ],
                "incident": None
                if incident is None
                else {
                    "deployment": incident.deployment,
                    "start_s": incident.start_s,
                    "end_s": incident.end_s,
                },
                "results": {name: metrics(results[(sid, name)], oracle) for name in resolved.names},
            }
        )
    return {
        "benchmark": "quality",
        "format": 1,
        "seed": seed,
        "requests": requests,
        "duration_s": DURATION_S,
        "arrival_rate_per_s": _round(requests / DURATION_S),
        "utility": {
            "formula": "accepted - lambda_cost*cost_usd - lambda_latency*latency_s "
            "- failure_penalty*failed",
            "lambda_cost_per_usd": LAMBDA_COST,
            "lambda_latency_per_s": LAMBDA_LATENCY,
            "failure_penalty": FAILURE_PENALTY,
        },
        "policies": {name: policies.describe(name) for name in resolved.names},
        "skipped": [{"policy": name, "reason": reason} for name, reason in resolved.skipped],
        "scenarios": scenarios_out,
    }


def _arms(scenario: Scenario) -> list[str]:
    return [arm.deployment for arm in Policy(scenario.config, routing_params()).arms(ROUTE)]


def metrics(result: RunResult, oracle: RunResult) -> dict[str, Any]:
    """The figures of one cell; regret is against the oracle's run of the same scenario."""
    n = result.requests
    gaps = [o - p for o, p in zip(oracle.utility, result.utility, strict=True)]
    curve: list[float] = []
    total = 0.0
    step = max(1, n // CURVE_POINTS)
    for index, gap in enumerate(gaps, start=1):
        total += gap
        if index % step == 0 or index == n:
            curve.append(_round(total))
    attempts = sum(sum(bins) for bins in result.share.values()) or 1
    return {
        "regret_per_1k": _round(sum(gaps) * 1000.0 / n),
        "utility_per_request": _round(sum(result.utility) / n),
        "availability": _round(result.answered / n),
        "first_try_success": _round(result.first_try_ok / n),
        "accepted": _round(result.accepted / n),
        "attempts_per_request": _round(result.attempts / n),
        "cost_usd": _round(result.cost_usd),
        "cost_per_1k_success_usd": _round(result.cost_usd * 1000.0 / max(1, result.answered)),
        "latency_p50_ms": _round(percentile(result.latencies_ms, 0.50)),
        "latency_p95_ms": _round(percentile(result.latencies_ms, 0.95)),
        "detection_s": None if result.detection_s is None else _round(result.detection_s),
        "recovery_s": None if result.recovery_s is None else _round(result.recovery_s),
        "incident_attempts": result.incident_attempts,
        "share": {d: _round(sum(bins) / attempts) for d, bins in result.share.items()},
        "share_series": result.share,
        "cumulative_regret": {"every": step, "values": curve},
    }


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered))))
    return ordered[rank - 1]


def _round(value: float) -> float:
    return round(value, 6)
