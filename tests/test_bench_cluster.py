"""The pure parts of ``switchyard bench cluster``: its timeline, its victim, its counts."""

from __future__ import annotations

import pytest

from bench.cluster_report import (
    Timeline,
    answer_summary,
    phase_of,
    render,
    target_node,
    timeline,
)


def test_a_kill_comes_at_a_third_and_its_restart_at_two_thirds() -> None:
    assert timeline("kill", 300.0, 30.0) == Timeline(100.0, 200.0, 300.0)


def test_a_pause_lasts_pause_s_and_must_end_within_the_run() -> None:
    assert timeline("pause", 300.0, 30.0) == Timeline(100.0, 130.0, 300.0)
    with pytest.raises(ValueError):
        timeline("pause", 60.0, 45.0)
    with pytest.raises(ValueError):
        timeline("reboot", 60.0, 10.0)


def test_the_victim_leads_the_most_partitions_the_lowest_id_among_equals() -> None:
    assert target_node({1: 2, 2: 4, 3: 2}) == 2
    assert target_node({3: 3, 2: 3, 1: 2}) == 2


def test_requests_are_counted_in_the_phase_they_were_sent() -> None:
    assert [phase_of(t, 10.0, 20.0) for t in (9.9, 10.0, 19.9, 20.0)] == [
        "before",
        "during",
        "during",
        "after",
    ]
    sent = {"a": 5.0, "b": 12.0, "c": 25.0, "d": 26.0}
    responses = [
        {"request_id": "a", "id": "ra", "status": "ok", "_ts": 5.1},
        {"request_id": "b", "id": "rb", "status": "error", "error": {"type": "x", "code": "y"},
         "_ts": 21.0},
        {"request_id": "b", "id": "rb", "status": "error", "error": {"type": "x", "code": "y"},
         "_ts": 21.5},
        {"request_id": "c", "id": "rc", "status": "ok", "_ts": 25.2},
        {"request_id": "other", "id": "ro", "status": "ok", "_ts": 1.0},
    ]  # fmt: skip
    summary = answer_summary(sent, responses, fault_at=10.0, recovered_at=20.0)
    assert (summary["sent"], summary["answered"], summary["ok"]) == (4, 3, 2)
    assert summary["lost"] == 1 and summary["lost_ids"] == ["d"]
    assert summary["duplicate_answers"] == 1 and summary["requests_answered_twice"] == 1
    assert summary["errors"] == {"x/y": 1}
    during = summary["phases"]["during"]
    assert during["sent"] == 1 and during["latency_ms"]["p50"] == pytest.approx(9000.0)
    assert summary["phases"]["after"]["lost"] == 1
    report = {
        "rate": 20.0,
        "minutes": 1.0,
        "fault": {"kind": "kill", "node": 2, "led_partitions": 4, "at_s": 10.0,
                  "recovered_at_s": 20.0, "served_at_s": 23.0},
        "answers": summary,
        "isr": {"back_in_isr": False},
        "load_average_start": "1 1 1",
        "load_average_end": "2 2 2",
    }  # fmt: skip
    table = render(report)
    assert "| lost (never answered) | 1 |" in table and "| node 2 back in every ISR | no |" in table
