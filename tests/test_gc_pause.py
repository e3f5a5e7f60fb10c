"""Replay pauses the cycle collector while it reads a log and while it folds it
(app/audit/gc_pause.py): that is only sound while neither makes reference cycles,
which this checks."""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator
from pathlib import Path

from app.audit.export import write_export
from app.audit.gc_pause import no_cycle_collection
from app.audit.log import read_export
from app.audit.replay import replay
from app.settings import Topics
from bench.logs.synthetic import synthetic_log
from bench.replay_speed import PROFILES, bench_policy


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """The cycle collector paused as replay pauses it, after a collection."""
    gc.collect()
    with no_cycle_collection():
        yield


def test_the_fold_makes_no_reference_cycles() -> None:
    for strategy in ("ucb1", "thompson"):
        policy = bench_policy(strategy)
        log = synthetic_log(policy, PROFILES, 300, interval_s=0.02)
        with collector_off():
            report = replay(log, policy)
            assert report.ok
            del report
            assert gc.collect() == 0


def test_reading_an_export_makes_no_reference_cycles(tmp_path: Path) -> None:
    """Every stream, feedback (valid, invalid, unreadable) and unreadable records included."""
    policy = bench_policy("ucb1")
    write_export(synthetic_log(policy, PROFILES, 200, interval_s=0.02), tmp_path, Topics())
    request_id = json.loads((tmp_path / "decisions.jsonl").read_text().splitlines()[0])
    feedback = [
        {"request_id": request_id["request_id"], "score": 0.5, "source": "user"},
        {"request_id": request_id["request_id"], "score": 7, "source": "user"},
        "not json",
    ]
    lines = [f if isinstance(f, str) else json.dumps(f) for f in feedback]
    (tmp_path / "feedback.jsonl").write_text("\n".join(lines) + "\n")
    with (tmp_path / "outcomes.jsonl").open("a") as outcomes:
        outcomes.write('{"type": "nonsense"}\n')
    with collector_off():
        log = read_export(tmp_path)
        assert len(log.feedback) == 3 and log.unreadable()["feedback"] == 2
        assert log.unreadable()["outcomes"] == 1 and len(log.routing) > 400
        del log
        assert gc.collect() == 0


def test_replay_and_reading_leave_the_collector_as_they_found_it(tmp_path: Path) -> None:
    policy = bench_policy("ucb1")
    log = synthetic_log(policy, PROFILES, 20, interval_s=0.02)
    write_export(log, tmp_path, Topics())
    assert gc.isenabled()
    replay(log, policy)
    read_export(tmp_path)
    assert gc.isenabled()
    gc.disable()
    try:
        read_export(tmp_path)
        assert not gc.isenabled()  # a caller's pause is left in place
    finally:
        gc.enable()
