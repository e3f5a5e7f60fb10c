"""``switchyard bench affinity`` at a small size: affinity keeps conversations on their
cache, and a breaker opening on the pinned deployment moves its sessions at once."""

from __future__ import annotations

import argparse

from bench.affinity import SCENARIOS, Scenario, add_arguments, breaker_row, row, simulate


def args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--conversations", "40", "--turns", "5", "--spread", "120", *extra])


def test_affinity_keeps_conversations_on_their_cache() -> None:
    on, _, off = (row(s, simulate(s, args()).stats) for s in SCENARIOS[:3])
    assert on["hit_rate"] >= 0.9
    assert off["hit_rate"] <= 0.5
    assert on["cost_usd"] < off["cost_usd"]
    assert on["affinity_decisions"] > 0 and off["affinity_decisions"] == 0


def test_a_breaker_on_the_pinned_deployment_moves_its_sessions_at_once() -> None:
    scenario = Scenario("breaker", sessions=True, affinity=True, fail_at=150.0)
    world = simulate(scenario, args())
    report = breaker_row(world, 150.0)
    assert report["breaker_opened_after_s"] is not None
    assert report["sessions_pinned_at_open"] > 0
    assert report["next_turn_elsewhere"] > 0
    assert report["next_turn_on_failing_otherwise"] == 0
    assert report["errors_answered"] == 0  # failed attempts were retried elsewhere
    assert set(report["decisions_to_failing_after_open"]) <= {"half_open_probe"}
