"""The pure parts of ``bench scaleout``, on small synthetic records: no broker, nothing timed."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
import yaml
from aiokafka.partitioner import DefaultPartitioner

from app.config.schema import parse_config
from bench.scaleout import add_arguments, passed
from bench.scaleout_metrics import (
    TIMELINE,
    answers,
    breaker_per_route,
    burst_summary,
    partition_of,
    pick_routes,
    rebalance_stalls,
    render,
    routes_by_partition,
    schedule,
)
from bench.scaleout_stack import PROVIDERS, providers_yaml
from bench.throughput.mocks import MockServer

DEAD = "mock-c:bench-model"


def test_partition_of_is_the_producers_default_partitioner() -> None:
    partitioner = DefaultPartitioner()
    every = list(range(12))
    for name in ("chat", "r00", "r47", "a-much-longer-route-name"):
        assert partition_of(name.encode(), 12) == partitioner(name.encode(), every, every)


def test_routes_land_on_distinct_partitions() -> None:
    routes = pick_routes(12, 12)
    assert len(set(routes)) == 12
    assert sorted(partition_of(r.encode(), 12) for r in routes) == list(range(12))
    assert pick_routes(6, 12) == pick_routes(6, 12)
    with pytest.raises(ValueError):
        pick_routes(13, 12)


def test_schedule_adds_two_workers_then_stops_and_kills_within_the_load() -> None:
    plan = schedule(100.0)
    assert [at for at, _ in plan] == sorted(at for at, _ in plan)
    assert all(0 < at < 100.0 for at, _ in plan)
    labels = [step.label() for _, step in plan]
    assert labels[:2] == ["add worker-1", "add worker-2"]
    assert {"kill worker-0", "stop worker-1"} <= set(labels)
    assert labels.index("outage") < labels.index("kill worker-0") < labels.index("recover")
    assert len(plan) == len(TIMELINE)
    with pytest.raises(ValueError):
        schedule(0.0)


def test_providers_yaml_puts_every_deployment_on_every_route(tmp_path: Any) -> None:
    mocks = {pid: MockServer("light", 20, tmp_path) for pid in PROVIDERS}
    text = providers_yaml(mocks, ["r00", "r02"])
    config = parse_config(yaml.safe_load(text))
    assert sorted(config.routes) == ["r00", "r02"]
    assert all(list(route.providers) == list(PROVIDERS) for route in config.routes.values())


def _response(request_id: str, status: str = "ok", rid: str | None = None) -> dict[str, Any]:
    return {"request_id": request_id, "id": rid or f"resp-{request_id}", "status": status}


def test_answers_counts_lost_duplicates_and_conflicts() -> None:
    error = {**_response("c", "error"), "error": {"type": "lost", "code": "x"}}
    responses = [_response("a"), _response("a"), _response("b"), _response("b", rid="other")]
    got = answers(["a", "b", "c", "d"], [*responses, error, _response("other-run")])
    assert (got["answered"], got["lost"], got["lost_ids"]) == (3, 1, ["d"])
    assert (got["ok"], got["errors"]) == (2, {"lost/x": 1})
    assert (got["duplicate_copies"], got["requests_with_duplicates"]) == (1, 1)
    assert got["conflicting_answers"] == ["b"]


def _decision(route: str, at: float, deployment: str, **extra: Any) -> dict[str, Any]:
    return {"route": route, "_ts": at, "deployment": deployment, "excluded": [], **extra}


def test_breaker_per_route_finds_the_trip_and_leaks_after_it() -> None:
    tripped = [{"deployment": DEAD, "reason": "breaker_open"}]
    decisions = [
        _decision("r00", 10.5, DEAD),
        _decision("r00", 11.2, "mock-a:bench-model", excluded=tripped),
        _decision("r00", 12.0, DEAD, selection_rule="half_open_probe"),
        _decision("r02", 11.0, DEAD),
        _decision("r02", 11.5, "mock-a:bench-model", excluded=tripped),
        _decision("r02", 13.0, DEAD, selection_rule="score"),  # a leak
        _decision("r02", 25.0, DEAD, selection_rule="score"),  # after the outage
    ]
    outcomes = [
        {"route": "r00", "_ts": 11.0, "deployment": DEAD},
        {"route": "r02", "_ts": 11.3, "deployment": DEAD},
    ]
    result = breaker_per_route(decisions, outcomes, ["r00", "r02", "r03"], DEAD, (10.0, 20.0))
    assert result["routes_tripped"] == 2
    assert result["per_route"]["r00"]["trip_lag_ms"] == pytest.approx(200.0)
    assert result["per_route"]["r02"]["trip_lag_ms"] == pytest.approx(200.0)
    assert (result["leaked_after_trip"], result["probes"]) == (1, 1)
    assert result["attempts_to_dead"] == 4
    assert result["per_route"]["r03"]["trip_lag_ms"] is None


def test_routes_by_partition() -> None:
    events = [(0, "r00"), (0, "r00"), (3, "r02"), (5, None), (4, "r02")]
    assert routes_by_partition(events) == {"r00": [0], "r02": [3, 4]}


def test_burst_summary_rates_and_cpu_per_ok() -> None:
    published = {f"x{i}": 100.0 for i in range(11)}
    first = {f"x{i}": {"status": "ok", "_ts": 101.0 + i / 10} for i in range(10)}
    summary = burst_summary(published, first, {"worker-0": 1.0, "broker": 0.5}, {"worker-0": 90.0})
    assert (summary["requests"], summary["answered"], summary["ok"]) == (11, 10, 10)
    assert summary["seconds"] == pytest.approx(1.9)
    assert summary["ok_per_s"] == pytest.approx(10 / 1.9)
    assert summary["cpu_ms_per_ok"]["worker-0"] == pytest.approx(100.0)


def _report() -> dict[str, Any]:
    got = answers(["a"], [_response("a")])
    breaker = breaker_per_route([], [], ["r00"], DEAD, (0.0, 1.0))
    replay = {"ok": True, "decisions": {"recorded": 1, "reproduced": 1, "mismatched": 0},
              "responses": {"recorded": 1, "reproduced": 1, "mismatched": 0},
              "not_rederived": 0, "not_recorded": 0, "pending": 0}  # fmt: skip
    steady = {"rate": 40.0, "routes": 1, "partitions": 12, "answers": got, "breaker": breaker,
              "replay": replay, "steps": [{"label": "add worker-1", "at_s": 10.0}]}  # fmt: skip
    cpu = {"worker-0": 0.5, "broker": 0.2, "driver": 0.1}
    ok = {"a": {"status": "ok", "_ts": 1.0}}
    summary = burst_summary({"a": 0.0}, ok, cpu, {"worker-0": 80.0})
    burst = {"name": "all routes, 1 worker", **summary}
    fold = {"events": 10, "cpu_s": 0.01, "events_per_cpu_s": 1000.0}
    return {"steady": steady, "bursts": [burst], "fold": fold}


def test_render_and_verdict() -> None:
    report = _report()
    text = render(report)
    assert "| answered / lost | 1 / 0 |" in text
    assert "| all routes, 1 worker | 1 | 1 / 1 |" in text
    assert "1,000 events/s" in text
    assert passed(report)
    report["steady"]["breaker"]["leaked_after_trip"] = 1
    assert not passed(report)


def test_arguments_have_bounded_defaults() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([])
    assert args.duration * args.rate <= 10_000
    assert args.drain_timeout_s > 0 and args.partitions == 12


def test_rebalance_stalls_from_a_worker_log() -> None:
    line = (
        "[2026-12-01 14:28:11,367] [12287] [WARNING] [^--Consumer]: wait_empty: Waiting for tasks"
    )
    heartbeat = "[2026-12-01 14:28:12,000] [1] [WARNING] Heartbeat failed for group switchyard "
    text = "\n".join([line, heartbeat + "because it is rebalancing", line.replace(":11,", ":21,")])
    found = rebalance_stalls(text)
    assert found["wait_empty_warnings"] == 2
    assert (found["first"], found["last"]) == ("2026-12-01 14:28:11,367", "2026-12-01 14:28:21,367")
    assert found["heartbeats_failed_rebalancing"] == 1
    assert rebalance_stalls("")["first"] is None
