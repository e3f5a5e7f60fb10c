"""The pure parts of ``bench burst`` and ``bench backlog``, on small synthetic records.

No stack, no broker, nothing timed: classification, rates, changelog reading, reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config.schema import parse_config
from bench.backlog import Timeline, all_ok_after_s, backlog_report, render_backlog
from bench.burst import burst_report, render_burst
from bench.queue_fates import (
    FATES,
    ChangelogStats,
    drain_rates,
    exclusion_counts,
    fate,
    fate_counts,
    outcome_counts,
)
from bench.queue_stack import PROVIDERS, ROUTE, providers_yaml
from bench.throughput.mocks import MockServer

FULL = "no deployment of route 'chat' can take attempt 1 (a: concurrency_full, b: concurrency_full)"


def _ok(request_id: str, at: float) -> dict[str, Any]:
    return {"request_id": request_id, "status": "ok", "_ts": at}


def _error(request_id: str, at: float, kind: str, code: str, message: str = "") -> dict[str, Any]:
    error = {"type": kind, "code": code, "message": message}
    return {"request_id": request_id, "status": "error", "error": error, "_ts": at}


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (_ok("r", 1.0), "ok"),
        (_error("r", 1.0, "no_deployment_available", "no_candidate", FULL), "refused_capacity"),
        (_error("r", 1.0, "no_deployment_available", "exhausted", FULL), "refused_capacity"),
        (_error("r", 1.0, "no_deployment_available", "no_candidate", "a: breaker_open"), "other"),
        (_error("r", 1.0, "deadline_exceeded", "deadline_exceeded"), "deadline"),
        (_error("r", 1.0, "lost", "deadline_exceeded"), "deadline"),
        (_error("r", 1.0, "provider_error", "server_error"), "other"),
        ({"request_id": "r", "status": "error", "error": None}, "other"),
        (None, "unanswered"),
    ],
)
def test_fate_of_a_response(response: dict[str, Any] | None, expected: str) -> None:
    assert fate(response) == expected


def test_fate_counts_name_every_fate() -> None:
    counts = fate_counts([_ok("a", 1.0), None, _error("b", 1.0, "lost", "deadline_exceeded")])
    assert list(counts) == list(FATES)
    assert (counts["ok"], counts["unanswered"], counts["deadline"], counts["other"]) == (1, 1, 1, 0)


def test_drain_rates() -> None:
    rates = drain_rates(100.0, [100.0 + i / 10 for i in range(1, 101)])  # 10 ok/s for 10 s
    assert rates["overall"] == pytest.approx(10.0)
    assert rates["steady"] == pytest.approx(10.0)
    assert rates["first_ok_s"] == pytest.approx(0.1)
    assert rates["last_ok_s"] == pytest.approx(10.0)
    assert drain_rates(0.0, [])["overall"] is None


def _row(breaker: str, parked: int = 0, open_attempts: int = 0, line: int = 0) -> bytes:
    row = {
        "line": {"waiting": line, "after": 7},
        "arms": {"a": {"breaker": {"state": breaker}}, "b": {"breaker": {"state": "CLOSED"}}},
        "parked": {f"p{i}": {} for i in range(parked)},
        "open_attempts": {f"o{i}": {} for i in range(open_attempts)},
    }
    return json.dumps(row).encode()


def test_changelog_stats_sizes_waiting_and_breakers() -> None:
    stats = ChangelogStats()
    rows = [_row("CLOSED", 3, 5, 40), _row("OPEN"), _row("OPEN"), _row("HALF_OPEN")]
    for at, value in enumerate(rows):
        stats.add(b'"chat"', value, float(at))
    stats.add(b'"chat"', None, 9.0)  # a tombstone
    assert stats.records == 5
    assert stats.max_bytes == max(len(r) for r in rows)
    assert stats.last_bytes == {'"chat"': 0}
    assert (stats.max_parked, stats.max_open_attempts, stats.max_line_waiting) == (3, 5, 40)
    assert stats.breaker_first_at == {"a": {"OPEN": 1.0, "HALF_OPEN": 3.0}}
    assert stats.breaker_rows == {"a": {"OPEN": 2, "HALF_OPEN": 1}}


def test_burst_report_and_table() -> None:
    published = {f"r{i}": 10.0 for i in range(4)}
    responses = {
        "r0": _ok("r0", 11.0),
        "r1": _ok("r1", 12.0),
        "r2": _error("r2", 10.5, "no_deployment_available", "no_candidate", FULL),
    }
    report = burst_report(published, responses, ChangelogStats())
    assert report["answered"] == 3
    assert report["fates"] == {
        "ok": 2, "refused_capacity": 1, "deadline": 0, "other": 0, "unanswered": 1,
    }  # fmt: skip
    assert report["drain"]["overall"] == pytest.approx(1.0)
    assert report["drain"]["last_answer_s"] == pytest.approx(2.0)
    assert report["latency_ms"]["max"] == pytest.approx(2000.0)
    table = render_burst(report)
    assert "| refused for capacity | 1 |" in table
    assert "| answered | 3 / 4 |" in table


def test_all_ok_after() -> None:
    assert all_ok_after_s([(101.0, True), (102.0, True)], 100.0) == pytest.approx(1.0)
    assert all_ok_after_s([(101.0, False), (105.0, True), (103.0, False)], 100.0) == 5.0
    assert all_ok_after_s([(101.0, True), (102.0, False)], 100.0) is None
    assert all_ok_after_s([], 100.0) is None


def test_backlog_report_by_phase_and_table() -> None:
    timeline = Timeline(stop_at=100.0, stopped_at=101.0, restart_at=250.0, deadline_s=120.0)
    published = {"early": 50.0, "dead": 120.0, "alive": 200.0, "new": 260.0}
    responses = {
        "early": _ok("early", 50.1),
        "dead": _error("dead", 252.0, "deadline_exceeded", "deadline_exceeded"),
        "alive": _ok("alive", 253.0),
        "new": _ok("new", 260.2),
    }
    outcomes = [
        {"deployment": "mock-a:m", "status_class": "success", "latency_ms": 21.0},
        {"deployment": "mock-a:m", "status_class": "expired", "latency_ms": 9000.0},
    ]
    changelog = ChangelogStats()
    changelog.add(b'"chat"', _row("OPEN"), 255.0)
    report = backlog_report(published, responses, timeline, outcomes, changelog)
    assert report["phases"]["before"]["fates"]["ok"] == 1
    assert report["phases"]["outage"]["fates"]["deadline"] == 1
    assert report["phases"]["after"]["requests"] == 1
    assert report["alive_at_restart"]["requests"] == 1
    assert report["alive_at_restart"]["fates"]["ok"] == 1
    assert report["after_restart"]["all_ok_after_s"] == pytest.approx(10.0)
    assert report["after_restart"]["first_ok_answer_s"] == pytest.approx(3.0)
    assert report["outcomes"] == {"mock-a:m": {"success": 1, "expired": 1}}
    assert report["breaker_not_closed_s_after_restart"] == {"a": {"OPEN": 5.0}}
    assert report["outcome_latency_ms"]["expired"]["max"] == 9000.0
    report["exclusions"] = exclusion_counts(
        [{"excluded": [{"deployment": "mock-a:m", "reason": "breaker_open"}]}]
    )
    report["bandit_stats"] = {"chat": {"mock-a:m": {"breaker": "CLOSED"}}}
    table = render_backlog(report)
    assert "| mock-a:m | success 1, expired 1 | breaker_open 1 | – | CLOSED |" in table
    assert "| a | – | – | OPEN +5.0 | – |" in table
    assert "success 21/21, expired 9000/9000" in table
    assert "outage errors: deadline_exceeded/deadline_exceeded 1" in table


def test_outcome_counts() -> None:
    outcomes = [{"deployment": "b", "status_class": "timeout"}, {"deployment": "a"}]
    assert outcome_counts(outcomes) == {"a": {"None": 1}, "b": {"timeout": 1}}


def test_providers_yaml_one_route_two_capped_deployments(tmp_path: Path) -> None:
    mocks = [MockServer("light", 20, tmp_path) for _ in PROVIDERS]
    config = parse_config(yaml.safe_load(providers_yaml(mocks, 500)))
    assert config.default_route == ROUTE
    assert [p.id for p in config.providers] == list(PROVIDERS)
    assert {p.max_concurrency for p in config.providers} == {500}
