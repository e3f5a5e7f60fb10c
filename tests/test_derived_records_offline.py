"""The offline users of the one driver with wave 2's derived records (budget asks and
verdicts, requests a dynamic route forwards): a synthetic log carries them and replays
exactly, and a counterfactual derives its own instead of reading the recorded ones."""

from __future__ import annotations

from factories import budgeted_fallbacks, dep

from app.audit.counterfactual import counterfactual
from app.audit.log import events
from app.audit.replay import replay
from app.contract import BudgetSettle, RequestAccepted, StatusClass
from bench.logs.synthetic import Profile, synthetic_log

PROFILES = {
    dep("a"): Profile(success=0.9, latency_ms=800.0, failure=StatusClass.SERVER_ERROR),
    dep("b"): Profile(success=0.95, latency_ms=600.0),
    dep("c"): Profile(success=0.99, latency_ms=500.0),
}


def test_a_synthetic_log_with_budgets_and_dynamic_routes_replays_exactly() -> None:
    recorded = synthetic_log(budgeted_fallbacks(0.05), PROFILES, 300)
    kinds = {type(e).__name__ for e in events(recorded.routing)}
    assert {"BudgetAsk", "BudgetVerdict", "BudgetSettle"} <= kinds
    settled = [e for e in events(recorded.routing) if isinstance(e, BudgetSettle)]
    assert settled and sum(e.cost_usd for e in settled) <= 0.05
    report = replay(recorded, budgeted_fallbacks(0.05))
    assert report.ok and report.mismatched == 0 and report.reproduced > 0
    answered = {r.request_id for r in events(recorded.responses)}
    asked = {
        e.request.request_id for e in events(recorded.routing) if isinstance(e, RequestAccepted)
    }
    assert answered == asked  # every request answered: none left waiting for a verdict


def test_a_counterfactual_derives_its_own_budget_traffic() -> None:
    recorded = synthetic_log(budgeted_fallbacks(0.05), PROFILES, 300)
    same = counterfactual(recorded, budgeted_fallbacks(0.05), "same", runs=1)
    (run,) = same.runs
    assert run.first_changed == 0 and run.share == same.recorded.share
    # A looser budget: the alternative's own ledger lets more requests through.
    looser = counterfactual(recorded, budgeted_fallbacks(5.0), "looser budget", runs=1)
    (wider,) = looser.runs
    assert wider.attempts > same.recorded.attempts and wider.total_cost_usd > run.total_cost_usd
