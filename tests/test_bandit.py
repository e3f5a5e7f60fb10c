"""UCB1, cost and latency bonuses, the latency EMA (docs/design.md#ucb1-and-thompson-sampling).

Thompson sampling (§3) is in test_thompson.py.
"""

from __future__ import annotations

import math

import pytest
from factories import (
    T0,
    accepted,
    arm,
    dep,
    finish,
    fold,
    outcome,
    policy,
    provider,
    route_state,
)

from app.config.providers import DEFAULT_COST_PER_1M, SEED_COST_PER_1M
from app.contract import AttemptFinished, RequestAccepted, StatusClass
from app.routing import bandit
from app.routing.feedback import apply_outcome
from app.routing.params import Strategy
from app.routing.select import select
from app.routing.state import INITIAL_LATENCY_S, ArmState, RouteState
from app.routing.strategies import ALGORITHM_VERSION

# The cost bonus's table by provider-id prefix: prefix, $/1M, bonus at weight 0.1.
SEED_COST_TABLE = [
    ("cerebras", 0.20, 0.098),
    ("groq", 0.30, 0.097),
    ("deepseek", 0.50, 0.095),
    ("deepinfra", 0.60, 0.094),
    ("together", 0.80, 0.092),
    ("fireworks", 0.90, 0.091),
    ("cohere", 1.00, 0.090),
    ("perplexity", 1.00, 0.090),
    ("gemini", 1.25, 0.088),
    ("ai21", 1.50, 0.085),
    ("mistral", 2.00, 0.080),
    ("openrouter", 3.00, 0.070),
    ("openai", 5.00, 0.050),
    ("anthropic", 8.00, 0.020),
    ("huggingface", 0.00, 0.100),
]

# Worked examples of the latency bonus: average latency (s), bonus at weight 0.15.
SEED_LATENCY_TABLE = [
    (0.4, 0.148),
    (0.6, 0.147),
    (2.0, 0.140),
    (3.0, 0.135),
    (4.0, 0.130),
    (15.0, 0.075),
    (30.0, 0.000),
]

SQRT2 = math.sqrt(2)


# --------------------------------------------------------------------------- cost (§4)


def test_seed_cost_table_is_complete_and_exact() -> None:
    assert {name: cost for name, cost, _ in SEED_COST_TABLE} == SEED_COST_PER_1M
    assert DEFAULT_COST_PER_1M == 2.0


@pytest.mark.parametrize(("prefix", "cost", "expected"), SEED_COST_TABLE)
def test_cost_bonus_matches_seed_table(prefix: str, cost: float, expected: float) -> None:
    assert round(bandit.cost_bonus(cost, 0.1), 3) == expected
    # Resolved from the provider id's prefix.
    resolved = provider(f"{prefix}-some-model").bonus_cost_per_mtok
    assert resolved == cost
    assert round(bandit.cost_bonus(resolved, 0.1), 3) == expected


@pytest.mark.parametrize(
    ("provider_id", "cost"),
    [
        ("openai-gpt4", 5.00),
        ("openai", 5.00),
        ("anthropic-claude-3-opus", 8.00),
        ("groq-llama-3.1-70b", 0.30),
        ("huggingface-zephyr", 0.00),
        ("unknownco-x", 2.00),
        ("gpt-4.1", 2.00),  # a bare model id: prefix "gpt" is not in the table
        ("claude-sonnet-4.5", 2.00),
        ("openaicompat-x", 2.00),  # the prefix is the text before the first "-", not a substring
        ("mistral_large", 2.00),  # "_" does not split
    ],
)
def test_cost_resolved_by_provider_id_prefix(provider_id: str, cost: float) -> None:
    assert provider(provider_id).bonus_cost_per_mtok == cost


def test_unknown_prefix_gets_default_cost_bonus() -> None:
    cost = provider("unknownco-x").bonus_cost_per_mtok
    assert cost == 2.0
    assert bandit.cost_bonus(cost, 0.1) == pytest.approx(0.08)


def test_explicit_cost_per_mtok_overrides_prefix() -> None:
    assert provider("openai-gpt4", cost_per_mtok=0.5).bonus_cost_per_mtok == 0.5
    assert provider("openai-gpt4", cost_per_mtok=0.0).bonus_cost_per_mtok == 0.0
    # Input/output prices do not feed the cost bonus's single $/1M figure.
    assert provider("openai-gpt4", cost_per_mtok_input=0.1).bonus_cost_per_mtok == 5.0


@pytest.mark.parametrize(
    ("cost", "weight", "expected"),
    [
        (10.0, 0.1, 0.0),
        (12.0, 0.1, 0.0),  # clamped at 0, never negative
        (1000.0, 0.5, 0.0),
        (0.0, 0.0, 0.0),  # weight 0: no impact
        (2.0, 0.5, 0.4),
        (5.0, 0.2, 0.1),
        (0.0, 0.1, 0.1),
    ],
)
def test_cost_bonus_formula(cost: float, weight: float, expected: float) -> None:
    assert bandit.cost_bonus(cost, weight) == pytest.approx(expected, abs=1e-12)


# --------------------------------------------------------------------------- latency (§5)


@pytest.mark.parametrize(("latency", "expected"), SEED_LATENCY_TABLE)
def test_latency_bonus_matches_seed_table(latency: float, expected: float) -> None:
    assert round(bandit.latency_bonus(latency, 0.15), 3) == expected


@pytest.mark.parametrize(
    ("latency", "weight", "expected"),
    [(45.0, 0.15, 0.0), (30.0, 0.3, 0.0), (0.0, 0.15, 0.15), (15.0, 0.3, 0.15), (6.0, 0.0, 0.0)],
)
def test_latency_bonus_formula(latency: float, weight: float, expected: float) -> None:
    assert bandit.latency_bonus(latency, weight) == pytest.approx(expected, abs=1e-12)


def test_initial_latency_is_five_seconds() -> None:
    assert INITIAL_LATENCY_S == 5.0
    assert ArmState().avg_latency_s == 5.0
    assert ArmState().latency_samples == 0
    assert bandit.latency_bonus(ArmState().avg_latency_s, 0.15) == pytest.approx(0.125)


def test_ema_first_sample_taken_as_is_then_80_20() -> None:
    assert bandit.ema_latency(5.0, 1.2, 0) == 1.2
    assert bandit.ema_latency(1.2, 2.2, 1) == pytest.approx(1.2 * 0.8 + 2.2 * 0.2)
    assert bandit.ema_latency(1.4, 0.4, 7) == pytest.approx(1.2)
    assert bandit.EMA_NEW_WEIGHT == 0.2


def test_ema_sequence() -> None:
    samples = [2.0, 4.0, 1.0, 1.0]
    avg, count = 5.0, 0
    for sample in samples:
        avg, count = bandit.ema_latency(avg, sample, count), count + 1
    # 2.0 -> 2.0*.8+4*.2 = 2.4 -> 2.4*.8+.2 = 2.12 -> 2.12*.8+.2 = 1.896
    assert avg == pytest.approx(1.896)


def test_ema_applied_by_outcomes() -> None:
    pol = policy()
    d = dep("cerebras-x")
    fresh = ArmState(in_flight=1)
    first = apply_outcome(fresh, outcome("r1", d, latency_ms=800.0), T0, pol)
    assert first.avg_latency_s == pytest.approx(0.8)  # not 5.0*0.8 + 0.8*0.2
    assert first.latency_samples == 1
    second = apply_outcome(first, outcome("r2", d, latency_ms=1800.0), T0, pol)
    assert second.avg_latency_s == pytest.approx(0.8 * 0.8 + 1.8 * 0.2)
    assert second.latency_samples == 2
    # Timeouts and server errors are measured too: they say something about the provider.
    third = apply_outcome(
        second, outcome("r3", d, status=StatusClass.TIMEOUT, latency_ms=30_000.0), T0, pol
    )
    assert third.avg_latency_s == pytest.approx(1.0 * 0.8 + 30.0 * 0.2)


# --------------------------------------------------------------------------- UCB1 (§2)


def test_exploration_term_on_seed_example() -> None:
    # The worked examples print 0.43 / 0.52 / 0.60; the formula gives these.
    assert round(bandit.exploration_term(SQRT2, 100, 50), 3) == 0.429
    assert round(bandit.exploration_term(SQRT2, 100, 30), 3) == 0.554
    assert round(bandit.exploration_term(SQRT2, 100, 20), 3) == 0.679


def test_exploration_term_edge_cases() -> None:
    assert bandit.exploration_term(SQRT2, 100, 0) == math.inf
    assert bandit.exploration_term(0.0, 100, 10) == 0.0
    assert bandit.exploration_term(SQRT2, 1, 1) == 0.0  # ln(1) = 0
    assert bandit.exploration_term(2.0, 10, 10) == pytest.approx(2.0 * math.sqrt(math.log(10) / 10))
    # A larger C explores more.
    assert bandit.exploration_term(3.0, 50, 5) > bandit.exploration_term(0.5, 50, 5)


def _seed_example_state() -> RouteState:
    # Latencies chosen so the latency bonus is the worked examples': 1 s -> .145, 10 s -> .100,
    # 2 s -> .140.
    return route_state(
        {
            dep("cerebras-x"): arm(50, 0.85, latency=1.0),
            dep("openai-x"): arm(30, 0.90, latency=10.0),
            dep("groq-x"): arm(20, 0.80, latency=2.0),
        }
    )


def test_ucb1_seed_example_groq_wins() -> None:
    pol = policy()  # cerebras-x, openai-x, groq-x, in that order
    selection = select(_seed_example_state(), "chat", "req-1", 1, [], pol)
    assert selection.chosen is not None
    assert selection.chosen.deployment == dep("groq-x")
    assert selection.propensity == 1.0
    assert selection.excluded == []
    assert selection.arms == {}

    by_dep = {c.deployment: c for c in selection.candidates}
    assert [c.deployment for c in selection.candidates] == [
        dep("cerebras-x"),
        dep("openai-x"),
        dep("groq-x"),
    ]
    expected = {
        # deployment: (mean, exploration, cost bonus, latency bonus, score)
        dep("cerebras-x"): (0.85, 0.429, 0.098, 0.145, 1.522),
        dep("openai-x"): (0.90, 0.554, 0.050, 0.100, 1.604),
        dep("groq-x"): (0.80, 0.679, 0.097, 0.140, 1.716),
    }
    for deployment, (mean, explore, cost, latency, score) in expected.items():
        factors = by_dep[deployment].factors
        assert round(factors["mean_reward"], 3) == mean
        assert round(factors["exploration"], 3) == explore
        assert round(factors["cost_bonus"], 3) == cost
        assert round(factors["latency_bonus"], 3) == latency
        assert round(by_dep[deployment].score or 0.0, 3) == score
        # The factors add up to the score (the decision shows each contribution).
        assert by_dep[deployment].score == pytest.approx(sum(factors.values()))
    scores = [by_dep[d].score or 0.0 for d in expected]
    assert max(scores) == by_dep[dep("groq-x")].score


def test_ucb1_decision_through_fold_reports_ucb1_version() -> None:
    pol = policy()
    step = fold([accepted("req-1", T0 + 1)], pol, state=_seed_example_state()).steps[0]
    (dispatch,) = step.dispatches
    assert dispatch.decision.deployment == dep("groq-x")
    assert dispatch.decision.strategy == "ucb1"
    assert dispatch.decision.algorithm_version == ALGORITHM_VERSION[Strategy.UCB1]
    assert dispatch.decision.propensity == 1.0


def test_ucb1_exploitation_when_exploration_is_off() -> None:
    # C = 0: the best mean plus bonuses wins (OpenAI .90+.05+.10 = 1.05 vs cerebras 1.093).
    selection = select(_seed_example_state(), "chat", "r", 1, [], policy(exploration_bonus=0.0))
    assert selection.chosen is not None
    assert selection.chosen.deployment == dep("cerebras-x")
    # Quality only (weights 0): OpenAI's mean reward wins.
    quality = policy(exploration_bonus=0.0, cost_weight=0.0, latency_weight=0.0)
    selection = select(_seed_example_state(), "chat", "r", 1, [], quality)
    assert selection.chosen is not None
    assert selection.chosen.deployment == dep("openai-x")


def test_ucb1_weights_come_from_params() -> None:
    selection = select(_seed_example_state(), "chat", "r", 1, [], policy(cost_weight=0.5))
    factors = {c.deployment: c.factors for c in selection.candidates}
    assert factors[dep("openai-x")]["cost_bonus"] == pytest.approx(0.25)
    assert factors[dep("cerebras-x")]["cost_bonus"] == pytest.approx(0.49)


def test_ucb1_ties_go_to_config_order() -> None:
    state = route_state({dep("a"): arm(10, 0.5), dep("b"): arm(10, 0.5), dep("c"): arm(10, 0.5)})
    pol = policy(provider("a"), provider("b"), provider("c"))
    selection = select(state, "chat", "r", 1, [], pol)
    assert selection.chosen is not None
    assert selection.chosen.deployment == dep("a")
    assert bandit.argmax_first([0.3, 0.7, 0.7, 0.1]) == 1
    assert bandit.argmax_first([0.2]) == 0


def test_never_pulled_arms_chosen_first_in_config_order() -> None:
    pol = policy(provider("a"), provider("b"), provider("c"))
    # a is excellent and well known; b and c were never pulled.
    state = route_state({dep("a"): arm(500, 0.99, latency=0.1)})
    selection = select(state, "chat", "r", 1, [], pol)
    assert selection.chosen is not None
    assert selection.chosen.deployment == dep("b")
    scores = {c.deployment: c.score for c in selection.candidates}
    assert scores[dep("b")] is None
    assert scores[dep("c")] is None
    assert scores[dep("a")] is not None
    # Untried candidates still show their bonuses.
    factors = {c.deployment: c.factors for c in selection.candidates}
    assert set(factors[dep("b")]) == {"cost_bonus", "latency_bonus"}
    assert factors[dep("b")]["latency_bonus"] == pytest.approx(0.125)  # initial 5 s


def test_arms_in_flight_count_as_started() -> None:
    pol = policy(provider("a"), provider("b"), provider("c"))
    state = route_state(
        {dep("a"): arm(500, 0.99), dep("b"): arm(0, in_flight=1)}  # b started, not finished
    )
    selection = select(state, "chat", "r", 1, [], pol)
    assert selection.chosen is not None
    assert selection.chosen.deployment == dep("c")
    # b is scored: mean 0 (no pull finished) and exploration with n_b = 1, N = 501.
    b = next(c for c in selection.candidates if c.deployment == dep("b"))
    assert b.score is not None
    assert b.factors["mean_reward"] == 0.0
    assert b.factors["exploration"] == pytest.approx(SQRT2 * math.sqrt(math.log(501) / 1))


def test_in_flight_attempts_count_in_total_and_per_arm() -> None:
    pol = policy(provider("a"), provider("b"))
    state = route_state({dep("a"): arm(6, 0.5, in_flight=4), dep("b"): arm(10, 0.5)})
    selection = select(state, "chat", "r", 1, [], pol)
    factors = {c.deployment: c.factors for c in selection.candidates}
    # N = 6 + 4 + 10 = 20; n_a = 10 (6 pulls + 4 in flight), mean_a still over pulls.
    assert factors[dep("a")]["exploration"] == pytest.approx(SQRT2 * math.sqrt(math.log(20) / 10))
    assert factors[dep("a")]["mean_reward"] == pytest.approx(0.5)
    assert factors[dep("b")]["exploration"] == pytest.approx(SQRT2 * math.sqrt(math.log(20) / 10))


def test_exploration_sequence_tries_each_arm_once_through_fold() -> None:
    pol = policy(provider("a"), provider("b"), provider("c"))
    events: list[RequestAccepted | AttemptFinished] = []
    for i in range(3):
        events.append(accepted(f"r{i}", T0 + i))
    run = fold(events, pol)
    assert [d.deployment for d in run.decisions] == [dep("a"), dep("b"), dep("c")]
    assert all(run.state.arm(d).in_flight == 1 for d in (dep("a"), dep("b"), dep("c")))


def test_mean_reward_and_pulls_accumulate() -> None:
    pol = policy(provider("a"))
    events: list[RequestAccepted | AttemptFinished] = [
        accepted("r1", T0),
        finish("r1", dep("a"), T0 + 1, reward=0.25),
    ]
    events += [accepted("r2", T0 + 2), finish("r2", dep("a"), T0 + 3, reward=0.75)]
    state = fold(events, pol).state
    a = state.arm(dep("a"))
    assert a.pulls == 2
    assert a.total_reward == 1.0
    assert a.mean_reward == 0.5
    assert a.in_flight == 0
    assert ArmState().mean_reward == 0.0
