"""The pure helpers of ``bench/throughput/``: percentiles, /proc parsing, profiles, stages.

No timed assertions: loads are checked for counts and bounds only.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config.schema import parse_config
from bench.throughput.driver import STAGES, Trace, stage_breakdown
from bench.throughput.loads import closed_loop, fixed_rate
from bench.throughput.mocks import MockServer
from bench.throughput.procfs import (
    parse_proc_stat_cpu_s,
    parse_proc_status_kb,
    parse_schedstat_wait_s,
    process_cpu_s,
    process_memory_mb,
)
from bench.throughput.pyspy import summarize_collapsed
from bench.throughput.report import render
from bench.throughput.stats import Latency, percentile
from bench.throughput.switchyard import providers_yaml


def test_percentile_interpolates_between_closest_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 1.0) == 4.0
    assert percentile(values, 0.5) == pytest.approx(2.5)
    assert percentile(list(range(101)), 0.99) == pytest.approx(99.0)
    assert percentile([7.0], 0.99) == 7.0


def test_percentile_rejects_no_values_and_bad_quantiles() -> None:
    with pytest.raises(ValueError):
        percentile([], 0.5)
    with pytest.raises(ValueError):
        percentile([1.0], 1.5)


def test_latency_summary() -> None:
    summary = Latency.of([float(v) for v in range(1, 101)])
    assert summary is not None
    assert (summary.n, summary.p50, summary.max, summary.mean) == (100, 50.5, 100.0, 50.5)
    assert summary.p99 == pytest.approx(99.01)
    assert Latency.of([]) is None


# A command name with a space and a parenthesis: fields must be counted after the last ")".
STAT = (
    "4242 (python (x) worker) S 1 4242 4242 0 -1 4194304 9000 0 12 0 "
    "350 150 0 0 20 0 3 0 777 123456789 25000 18446744073709551615"
)


def test_proc_stat_cpu_is_utime_plus_stime_in_seconds() -> None:
    assert parse_proc_stat_cpu_s(STAT, 100) == pytest.approx(5.0)


def test_proc_status_fields_in_kb() -> None:
    status = "Name:\tpython\nVmPeak:\t  300000 kB\nVmHWM:\t  153600 kB\nVmRSS:\t  102400 kB\n"
    assert parse_proc_status_kb(status, "VmHWM") == 153600
    assert parse_proc_status_kb(status, "VmRSS") == 102400
    assert parse_proc_status_kb(status, "VmSwap") is None


def test_schedstat_wait_in_seconds() -> None:
    assert parse_schedstat_wait_s("357392895 168995000 27\n") == pytest.approx(0.168995)


def test_reading_this_process() -> None:
    assert process_cpu_s(os.getpid()) > 0.0
    peak = process_memory_mb(os.getpid(), "VmHWM")
    assert peak is not None and peak > 1.0
    assert process_memory_mb(2**22 + 12345) is None  # no such process


COLLAPSED = """\
<module> (app/cli.py:152);run_forever (asyncio/base_events.py:607);BaseEventLoop._run_once (asyncio/base_events.py:1922);Handle._run (asyncio/events.py:80);route (agents/router.py:45);_fold (agents/router.py:57);handle (app/routing/fold.py:69);ucb1 (app/routing/strategies.py:90) 6
<module> (app/cli.py:152);run_forever (asyncio/base_events.py:607);BaseEventLoop._run_once (asyncio/base_events.py:1922);Handle._run (asyncio/events.py:80);route (agents/router.py:45);save_route_state (tables/routing.py:30);BaseModel.model_dump (pydantic/main.py:520) 3
<module> (app/cli.py:152);run_forever (asyncio/base_events.py:607);BaseEventLoop._run_once (asyncio/base_events.py:1922);EpollSelector.select (selectors.py:468) 1
"""  # noqa: E501


def test_profile_summary_by_leaf_task_and_inclusive() -> None:
    summary = summarize_collapsed(COLLAPSED)
    assert summary["samples"] == 10
    assert summary["self_by_category"] == {
        "routing fold (app/routing)": 0.6,
        "pydantic (validate, dump)": 0.3,
        "asyncio loop, socket writes, epoll": 0.1,
    }
    assert summary["by_task"] == {"router agent": 0.9, "epoll wait": 0.1}
    inclusive = summary["inclusive"]
    assert inclusive["router: fold.handle (the decision, state update)"] == 0.6
    assert inclusive["router: save the route row (RouteState -> JSON, store)"] == 0.3
    assert inclusive["pydantic anywhere"] == 0.3
    assert summarize_collapsed("")["samples"] == 0


def test_stage_breakdown_adds_up_to_end_to_end() -> None:
    trace = Trace(
        published=100.000,
        decision_at=100.020,
        outcome_at=100.065,
        response_at=100.080,
        received=100.090,
        provider_ms=30.0,
        outcomes=1,
    )
    retried = Trace(published=1.0, decision_at=1.1, outcome_at=1.2, response_at=1.3, outcomes=2)
    stages = stage_breakdown([trace, retried, Trace()])
    values = [stages[name][0] for name in STAGES]
    assert values == pytest.approx([20.0, 15.0, 30.0, 15.0, 10.0])
    assert sum(values) == pytest.approx(90.0)
    assert all(len(v) == 1 for v in stages.values())


async def test_loads_stop_at_their_count() -> None:
    calls = 0

    async def call() -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)

    fixed = await fixed_rate(call, rate=2000.0, count=40, max_seconds=10.0, timeout_s=5.0)
    closed = await closed_loop(call, concurrency=8, count=50, max_seconds=10.0, timeout_s=5.0)
    assert (fixed.issued, fixed.done, fixed.errors) == (40, 40, 0)
    assert fixed.offered_rps is not None and fixed.offered_rps > 0
    assert closed.offered_rps is None
    assert (closed.issued, closed.done) == (50, 50)
    assert calls == 90


async def test_loads_count_errors_and_stop_at_their_time_cap() -> None:
    async def failing() -> None:
        raise RuntimeError("boom")

    run = await closed_loop(failing, concurrency=2, count=6, max_seconds=10.0, timeout_s=1.0)
    assert (run.done, run.errors) == (0, 6)
    assert run.first_error == "RuntimeError: boom"

    async def slow() -> None:
        await asyncio.sleep(0.05)

    capped = await fixed_rate(slow, rate=100.0, count=1_000_000, max_seconds=0.2, timeout_s=1.0)
    assert 0 < capped.issued < 1_000_000


def test_providers_file_is_a_valid_config(tmp_path: Path) -> None:
    mocks = [MockServer("light", 20, tmp_path), MockServer("llmock", 20, tmp_path)]
    config = parse_config(yaml.safe_load(providers_yaml(mocks, 3)), env={})
    assert config.route_names() == ["chat-light", "chat-llmock"]
    assert len(config.providers) == 6
    assert all(p.base_url.startswith("http://127.0.0.1:") for p in config.providers)


def bench_config(mocks: list[str]) -> dict[str, Any]:
    """A report's ``config`` as ``switchyard bench throughput`` writes it, for ``mocks``."""
    return {
        "mocks": mocks,
        "latency_ms": 20,
        "rate": 100.0,
        "low_rate": 20.0,
        "concurrency": 64,
        "deployments": 4,
        "cpus": 2,
    }


def test_render_without_results_does_not_fail() -> None:
    report = {
        "config": bench_config(["light"]),
        "load_start": "0.5 0.5 0.5",
    }
    text = render(report)
    assert "light (aiohttp)" in text
    assert "| errors + timeouts | – | – | – | | |" in text


def test_the_decisions_cpu_time_is_reported_beside_their_wall_time() -> None:
    def lat(p50: float, p99: float) -> dict[str, float]:
        return {"n": 100, "p50": p50, "p95": p99, "p99": p99, "mean": p50, "max": p99}

    strategies = ("ucb1", "thompson", "composite", "adaptive")
    decisions: dict[str, Any] = {
        s: {"latency_us": lat(50.0 + i, 120.0 + i), "cpu_us": lat(48.0 + i, 70.0 + i)}
        for i, s in enumerate(strategies)
    }
    decisions["router_event_ucb1"] = {}
    report = {
        "config": bench_config([]),
        "load_start": "0 0 0",
        "decisions": decisions,
    }
    text = render(report)
    assert "| `handle` ucb1 | 100 | 50 | 120 | 50 | missed (≤ 100) |" in text
    assert "thread CPU time p50 / p99 (µs): ucb1 48 / 70, thompson 49 / 71," in text
    del decisions["thompson"]["cpu_us"]  # a report from before the CPU column
    assert "thread CPU time" not in render(report)


def test_the_machines_cpu_budget_at_saturation_adds_every_process() -> None:
    saturation = {
        "rps": 250.0,
        "cpu_ms_per_request": 2.0,
        "broker_cpu_ms_per_request": 1.5,
        "driver_cpu_ms_per_request": 0.5,
        "mock_cpu_utilisation": 0.25,  # 1 ms per request at 250 req/s
    }
    report = {
        "config": bench_config(["light"]),
        "load_start": "0 0 0",
        "switchyard": {"strategy": "ucb1", "mocks": {"light": {"saturation": saturation}}},
    }
    text = render(report)
    assert (
        "| CPU ms/request at saturation, every process (whole) | – | worker 2.00 + broker 1.50"
        " + driver 0.50 + mock 1.00 = 5.00: 2 cores carry 400 req/s at that cost |" in text
    )
    del saturation["broker_cpu_ms_per_request"]  # an external broker: nothing to add up
    assert "every process" not in render(report)
