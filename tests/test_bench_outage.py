"""``switchyard bench outage``'s measurements, on hand-made records."""

from __future__ import annotations

from typing import Any

from bench.outage import _Favourite
from bench.outage_metrics import trip_delay

DEAD = "openai-gpt-4.1:gpt-4.1"
OTHER = "gemini-2.5-flash:gemini-2.5-flash"


def decision(
    ts: float, deployment: str, rule: str = "score", breaker: bool = False
) -> dict[str, Any]:
    excluded = [{"deployment": DEAD, "reason": "breaker_open"}] if breaker else []
    return {"_ts": ts, "deployment": deployment, "selection_rule": rule, "excluded": excluded}


def test_trip_lag_runs_from_the_last_failure_to_the_first_excluding_decision() -> None:
    outcomes = [{"_ts": t, "deployment": DEAD} for t in (10.0, 10.5, 11.0)]
    decisions = [
        decision(10.9, DEAD),
        decision(11.03, OTHER, breaker=True),
        decision(12.0, OTHER, breaker=True),
        decision(20.0, DEAD, rule="half_open_probe"),
    ]
    lag, leaked = trip_delay(decisions, outcomes, DEAD, start=9.0, end=30.0)
    assert lag is not None and round(lag) == 30
    assert leaked == 0


def test_a_non_probe_decision_after_the_trip_is_a_leak() -> None:
    decisions = [decision(11.0, OTHER, breaker=True), decision(12.0, DEAD)]
    outcomes = [{"_ts": 10.0, "deployment": DEAD}]
    assert trip_delay(decisions, outcomes, DEAD, start=9.0, end=30.0)[1] == 1


def test_no_trip_no_lag() -> None:
    assert trip_delay([decision(11.0, OTHER)], [], DEAD, start=9.0, end=30.0) == (None, 0)


def test_the_favourite_is_the_most_chosen_ties_in_config_order() -> None:
    order = [DEAD, OTHER]
    assert _Favourite({}).best(order) == DEAD
    assert _Favourite({OTHER: 3, DEAD: 1}).best(order) == OTHER
    assert _Favourite({OTHER: 2, DEAD: 2}).best(order) == DEAD
