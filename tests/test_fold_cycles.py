"""Replay pauses the cycle collector while folding (app/audit/replay.py): that is only
sound while the fold makes no reference cycles, which this checks."""

from __future__ import annotations

import gc

from app.audit.replay import replay
from app.audit.synthetic import synthetic_log
from bench.replay_speed import PROFILES, bench_policy


def test_the_fold_makes_no_reference_cycles() -> None:
    for strategy in ("ucb1", "thompson"):
        policy = bench_policy(strategy)
        log = synthetic_log(policy, PROFILES, 300, interval_s=0.02)
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            report = replay(log, policy)
            assert report.ok
            del report
            assert gc.collect() == 0
        finally:
            if enabled:
                gc.enable()


def test_replay_leaves_the_collector_as_it_found_it() -> None:
    policy = bench_policy("ucb1")
    log = synthetic_log(policy, PROFILES, 20, interval_s=0.02)
    assert gc.isenabled()
    replay(log, policy)
    assert gc.isenabled()
