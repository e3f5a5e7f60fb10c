"""The quality simulator: ground truth, scenarios, the live fold inside it, determinism, CLI."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest

from app import cli
from app.cli import main
from app.contract import AttemptFinished, RequestAccepted, StatusClass
from app.routing.fold import handle
from app.routing.params import Strategy
from app.routing.policy import Policy
from app.routing.state import RouteState
from bench import report
from bench.quality import DEFAULT_REQUESTS
from bench.sim import scenarios
from bench.sim.engine import simulate
from bench.sim.evaluation import dumps, evaluate, percentile
from bench.sim.policies import ORACLE, resolve, split
from bench.sim.routers import routing_params
from bench.sim.world import LAMBDA_COST, LAMBDA_LATENCY, World, utility

GEMINI = "gemini-2.5-flash:gemini-2.5-flash"
NEWCOMER = "groq-llama-4-maverick:llama-4-maverick"


def world(scenario_id: str, rate: float = 1.0) -> World:
    return World(scenarios.build(scenario_id), rate)


# --------------------------------------------------------------------------- ground truth


def test_utility_is_the_documented_formula() -> None:
    assert utility(True, 0.001, 0.5, False) == pytest.approx(1 - 0.001 * LAMBDA_COST - 0.05)
    assert utility(False, 0.0, 2.0, True) == pytest.approx(-1 - 2 * LAMBDA_LATENCY)


def test_latency_follows_seed_003_table() -> None:
    w = world("S1")
    latencies = [w.call(GEMINI, 0.0, random.Random(i)).latency_ms for i in range(4000)]
    assert percentile(latencies, 0.50) == pytest.approx(310, rel=0.03)
    assert percentile(latencies, 0.95) == pytest.approx(380, rel=0.04)


def test_best_deployment_of_seed_003_is_gemini() -> None:
    for scenario_id in ("S2", "S3", "S4", "S8"):
        assert GEMINI in scenarios.build(scenario_id).description


def test_outage_window_answers_503_at_once() -> None:
    w = world("S2")
    before = w.call(GEMINI, 1799.0, random.Random(1))
    during = w.call(GEMINI, 1800.0, random.Random(1))
    after = w.call(GEMINI, 1800.0 + 47 * 60, random.Random(1))
    assert before.status is StatusClass.SUCCESS and after.status is StatusClass.SUCCESS
    assert (during.status, during.http_status, during.latency_ms) == (
        StatusClass.SERVER_ERROR,
        503,
        30.0,
    )
    assert before.cost_usd == pytest.approx((800 * 0.30 + 250 * 2.50) / 1e6)


def test_newcomer_refuses_connections_until_it_joins() -> None:
    w = world("S5")
    assert w.call(NEWCOMER, 3599.0, random.Random(2)).status is StatusClass.CONNECTION_ERROR
    assert w.call(NEWCOMER, 3600.0, random.Random(2)).status is StatusClass.SUCCESS


def test_drift_and_silent_regression() -> None:
    drift = world("S4")
    assert drift.conditions(GEMINI, 1800.0).latency_factor == 1.0
    assert drift.conditions(GEMINI, 3600.0).latency_factor == pytest.approx(2.5)
    assert drift.conditions(GEMINI, 7000.0).latency_factor == pytest.approx(4.0)
    regression = world("S8")
    assert regression.conditions(GEMINI, 3599.0).acceptance == 0.90
    assert regression.conditions(GEMINI, 3600.0).acceptance == 0.60
    assert regression.conditions(GEMINI, 3600.0).success_rate == pytest.approx(0.9965)


def test_storm_throttles_to_a_share_with_retry_after() -> None:
    w = world("S3", rate=1.0)  # 25% of 1 request/s: one token every 4 s
    assert w.call(GEMINI, 2000.0, random.Random(3)).status is StatusClass.SUCCESS  # before
    assert w.call(GEMINI, 2400.0, random.Random(3)).status is StatusClass.SUCCESS
    limited = w.call(GEMINI, 2401.0, random.Random(3))
    assert limited.status is StatusClass.RATE_LIMITED and limited.http_status == 429
    assert limited.retry_after_s == pytest.approx(3.0)
    assert w.retry_after_s(GEMINI, 2404.0) is None
    assert w.call(GEMINI, 3600.0, random.Random(3)).status is StatusClass.SUCCESS  # after


def test_domains_change_acceptance_and_reach_the_request() -> None:
    scenario = scenarios.build("S7")
    assert len(scenario.domains) == 15
    w = World(scenario, 1.0)
    spread = {w.conditions(GEMINI, 0.0, d).acceptance for d in scenario.domains}
    assert len(spread) > 5
    result = simulate(scenario, "ucb1", 150, 0, record_log=True)
    assert result.log is not None
    for event in result.log:
        if isinstance(event, RequestAccepted):  # the ingest detected the domain drawn
            assert event.features is not None and event.features.domain is not None
            assert event.features.domain.domain == event.request.metadata["domain"]
    # Domain routing in the live fold: the domain's specialised model is used.
    used = [d for d, bins in result.share.items() if sum(bins)]
    assert used and all(d.rsplit("-", 1)[-1] in scenario.domains for d in used)


# --------------------------------------------------------------------------- the live fold


def test_every_simulated_attempt_is_a_decision_of_the_live_fold() -> None:
    scenario = scenarios.build("S2")
    result = simulate(scenario, "ucb1", 600, 5, record_log=True)
    assert result.log is not None
    policy = Policy(scenario.config, routing_params("ucb1"))
    state, dispatched = RouteState(), {d: 0 for d in result.share}
    for position, event in enumerate(result.log):
        step = handle(state, event, position, policy)
        state = step.state
        for dispatch in step.dispatches:
            dispatched[dispatch.decision.deployment] += 1
    assert dispatched == {d: sum(bins) for d, bins in result.share.items()}
    assert sum(dispatched.values()) == result.attempts > 600  # fallbacks during the outage
    retries = [e for e in result.log if isinstance(e, AttemptFinished) and e.retry is not None]
    assert retries and all(not e.outcome.final for e in retries)
    assert state.open_attempts == {}


def test_environment_cannot_change_the_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BANDIT_EXPLORATION_BONUS", "0")
    monkeypatch.setenv("BANDIT_STRATEGY", "thompson")
    params = routing_params()
    assert params.exploration_bonus == pytest.approx(math.sqrt(2))
    assert params.strategy is Strategy.UCB1


def test_policy_names_resolve_and_unknown_strategies_are_skipped() -> None:
    resolved = resolve(["ucb1", "not-a-strategy", "composite+CB_MODE=ewma", "ucb1+CB_MODE=nope"])
    assert resolved.names == ("ucb1", "composite+CB_MODE=ewma", ORACLE)
    assert [name for name, _ in resolved.skipped] == ["not-a-strategy", "ucb1+CB_MODE=nope"]
    assert split("composite+CB_MODE=ewma+EWMA_ALPHA=0.2") == (
        "composite",
        {"CB_MODE": "ewma", "EWMA_ALPHA": "0.2"},
    )
    with pytest.raises(ValueError, match="VARIABLE=value"):
        split("ucb1+oops")


# --------------------------------------------------------------------------- metrics


def test_regret_and_outage_metrics() -> None:
    document = evaluate(["S1", "S2"], ["round_robin", "static_priority"], 1000, seed=1)
    s1, s2 = (s["results"] for s in document["scenarios"])
    assert s1[ORACLE]["regret_per_1k"] == 0.0
    # In a quiet world the operator's static ranking is the oracle's choice.
    assert s1["static_priority"]["regret_per_1k"] == 0.0
    assert s1["round_robin"]["regret_per_1k"] > 20
    static = s2["static_priority"]
    assert static["detection_s"] is not None and static["detection_s"] <= 120
    assert static["recovery_s"] is not None and static["recovery_s"] > 0
    assert static["availability"] > 0.999
    assert s2["round_robin"]["detection_s"] is None  # no health tracking
    assert s2["round_robin"]["incident_attempts"] > static["incident_attempts"]
    assert s2[ORACLE]["detection_s"] == 0.0 and s2[ORACLE]["incident_attempts"] == 0
    curve = s2["round_robin"]["cumulative_regret"]["values"]
    assert curve[-1] == pytest.approx(s2["round_robin"]["regret_per_1k"], abs=1e-3)


def test_seed_thompson_pays_for_ignoring_cost() -> None:
    (s1,) = (s["results"] for s in evaluate(["S1"], ["thompson"], 300, seed=0)["scenarios"])
    assert s1["thompson"]["cost_per_1k_success_usd"] > 3 * s1[ORACLE]["cost_per_1k_success_usd"]
    assert s1["thompson"]["regret_per_1k"] > 20


def test_same_seed_same_json_in_one_or_two_processes() -> None:
    names = ["static_priority", "ucb1", "composite"]
    first = dumps(evaluate(["S3", "S8"], names, 700, seed=7, jobs=1))
    again = dumps(evaluate(["S3", "S8"], names, 700, seed=7, jobs=2))
    assert first == again
    other = evaluate(["S3"], ["round_robin"], 700, seed=8)
    assert (
        other["scenarios"][0]["results"][ORACLE]
        != json.loads(first)["scenarios"][0]["results"][ORACLE]
    )


# --------------------------------------------------------------------------- command and output


def test_cli_writes_json_and_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "quality", "--requests", "300", "--scenarios", "s1", "--seed", "2"]
    argv += ["--policies", "ucb1,adaptive-someday", "--out", str(tmp_path), "--jobs", "1"]
    assert main([*argv, "--no-plots"]) == 0
    out = capsys.readouterr()
    assert "| S1 stationary |" in out.out and "| S1 | ucb1 |" in out.out
    assert "skipped policy adaptive-someday" in out.err
    document = json.loads((tmp_path / "quality-seed2-n300.json").read_text())
    assert list(document["policies"]) == ["ucb1", ORACLE]
    assert document["skipped"][0]["policy"] == "adaptive-someday"
    assert DEFAULT_REQUESTS >= 1000
    assert main(["bench", "quality", "--scenarios", "S9", "--out", str(tmp_path)]) == 2
    assert "unknown scenario 'S9'" in capsys.readouterr().err


def test_a_benchmark_that_cannot_be_imported_does_not_break_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(cli.BENCHMARKS, "missing", ("bench.not_there", "a benchmark to come"))
    assert main(["bench", "missing"]) == 2
    assert "unavailable" in capsys.readouterr().err
    assert main(["bench", "quality", "--requests", "0", "--no-plots"]) == 2


def test_plots_degrade_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    document = evaluate(["S1"], ["round_robin"], 100, seed=0)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert report.plots(document, tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_plots_when_matplotlib_is_installed(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    document = evaluate(["S2"], ["round_robin"], 100, seed=0)
    (png,) = report.plots(document, tmp_path) or []
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
