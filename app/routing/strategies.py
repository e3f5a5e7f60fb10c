"""Ranking strategies: given the eligible arms in config order, score them and pick one.

Each returns every candidate's score with its per-factor contributions, the
chosen index, and the propensity of that choice under the strategy (1.0 for a
deterministic argmax/argmin). Thompson's draws come from generators seeded by
the request id and attempt, so a replay draws the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.events import Candidate
from app.routing import adaptive, bandit
from app.routing.policy import Arm, Policy
from app.routing.state import ArmState
from app.settings import Strategy
from app.understanding.modes import (
    DEFAULT_MODE,
    MODE_WEIGHTS,
    ModeWeights,
    RoutingMode,
    throughput_bonus,
)

ALGORITHM_VERSION = {
    Strategy.UCB1: "seed000-ucb1/1",
    Strategy.THOMPSON: "seed000-thompson/1",
    Strategy.COMPOSITE: "seed003-composite/1",
    Strategy.ADAPTIVE: "switchyard-adaptive/1",
}
#: Monte Carlo draws behind a Thompson decision's propensity (std. error <= 0.035).
PROPENSITY_DRAWS = 200

Eligible = Sequence[tuple[Arm, ArmState]]


@dataclass(frozen=True, slots=True)
class Ranking:
    chosen: int
    candidates: list[Candidate]
    propensity: float = 1.0
    rule: str = "score"


def rank(
    eligible: Eligible,
    total_started: int,
    request_id: str,
    attempt: int,
    policy: Policy,
    mode: RoutingMode = DEFAULT_MODE,
    now: float = 0.0,
) -> Ranking:
    strategy = policy.params.strategy
    if strategy is Strategy.THOMPSON:
        return thompson(eligible, request_id, attempt)
    if strategy is Strategy.COMPOSITE:
        return composite(eligible)
    if strategy is Strategy.ADAPTIVE:
        return adaptive_ranking(eligible, now, policy, mode)
    return ucb1(eligible, total_started, policy, mode)


def mode_weights(mode: RoutingMode, policy: Policy) -> ModeWeights:
    """Seed 000 §11's table per seed 004 mode; ``balanced`` keeps the environment's weights."""
    if mode is RoutingMode.BALANCED:
        return ModeWeights(cost=policy.params.cost_weight, latency=policy.params.latency_weight)
    return MODE_WEIGHTS[mode]


def _bonuses(arm: Arm, state: ArmState, weights: ModeWeights) -> dict[str, float]:
    bonuses = {
        "cost_bonus": bandit.cost_bonus(arm.provider.bonus_cost_per_mtok, weights.cost),
        "latency_bonus": bandit.latency_bonus(state.avg_latency_s, weights.latency),
    }
    if weights.throughput > 0:
        bonuses["throughput_bonus"] = throughput_bonus(state.tokens_per_s, weights.throughput)
    return bonuses


def ucb1(
    eligible: Eligible, total_started: int, policy: Policy, mode: RoutingMode = DEFAULT_MODE
) -> Ranking:
    params = policy.params
    weights = mode_weights(mode, policy)
    candidates: list[Candidate] = []
    scores: list[float] = []
    first_untried: int | None = None
    for index, (arm, state) in enumerate(eligible):
        bonuses = _bonuses(arm, state, weights)
        if state.started == 0:
            # Seed 000: an arm never pulled is chosen before the formula applies.
            first_untried = index if first_untried is None else first_untried
            candidates.append(Candidate(deployment=arm.deployment, score=None, factors=bonuses))
            scores.append(0.0)
            continue
        factors = {
            "mean_reward": state.mean_reward,
            "exploration": bandit.exploration_term(
                params.exploration_bonus, total_started, state.started
            ),
            **bonuses,
        }
        score = factors["mean_reward"] + factors["exploration"] + sum(bonuses.values())
        candidates.append(Candidate(deployment=arm.deployment, score=score, factors=factors))
        scores.append(score)
    if first_untried is not None:
        return Ranking(first_untried, candidates, rule="untried_first")
    return Ranking(bandit.argmax_first(scores), candidates)


def thompson(eligible: Eligible, request_id: str, attempt: int) -> Ranking:
    posteriors = [(state.alpha, state.beta) for _, state in eligible]
    samples = bandit.thompson_draws(posteriors, bandit.seeded_rng("thompson", request_id, attempt))
    chosen = bandit.argmax_first(samples)
    propensity = bandit.thompson_propensity(
        posteriors,
        chosen,
        bandit.seeded_rng("propensity", request_id, attempt),
        PROPENSITY_DRAWS,
    )
    candidates = [
        Candidate(
            deployment=arm.deployment,
            score=sample,
            factors={"alpha": state.alpha, "beta": state.beta, "sample": sample},
        )
        for (arm, state), sample in zip(eligible, samples, strict=True)
    ]
    return Ranking(chosen, candidates, propensity)


def composite(eligible: Eligible) -> Ranking:
    """Seed 003 §4: ``cost x (ewma_latency / p95_baseline)^2 x (1 + 10 x ewma_failure)``.

    Lowest wins; ties go to config order. An arm with no latency sample yet
    scores 0, so each arm is tried before the EWMAs steer.
    """
    candidates: list[Candidate] = []
    negated: list[float] = []
    for arm, state in eligible:
        factors = {
            "cost_usd": arm.workload_cost_usd,
            "latency_penalty": (state.ewma_latency_ms / arm.provider.p95_latency_baseline_ms) ** 2,
            "failure_penalty": 1.0 + 10.0 * state.ewma_failure,
        }
        score = factors["cost_usd"] * factors["latency_penalty"] * factors["failure_penalty"]
        candidates.append(Candidate(deployment=arm.deployment, score=score, factors=factors))
        negated.append(-score)
    return Ranking(bandit.argmax_first(negated), candidates)


def adaptive_ranking(
    eligible: Eligible, now: float, policy: Policy, mode: RoutingMode = DEFAULT_MODE
) -> Ranking:
    """:mod:`app.routing.adaptive`: the highest expected value per attempt wins.

    A mode scales the cost and waiting terms as seed 000 §11 scales UCB1's cost and
    latency bonuses against ``balanced`` (price: cost x3, waiting x1/3; quality: only
    success and acceptance count ...) and adds ``throughput``'s tokens/s bonus.
    """
    weights, balanced = MODE_WEIGHTS[mode], MODE_WEIGHTS[RoutingMode.BALANCED]
    cost_scale = weights.cost / balanced.cost
    wait_scale = weights.latency / balanced.latency
    candidates: list[Candidate] = []
    values: list[float] = []
    for arm, state in eligible:
        estimate = adaptive.estimate(arm, state.recent, now, policy, cost_scale, wait_scale)
        factors = estimate.factors()
        value = estimate.value
        if weights.throughput > 0:
            factors["throughput_bonus"] = throughput_bonus(state.tokens_per_s, weights.throughput)
            value += factors["throughput_bonus"]
        candidates.append(Candidate(deployment=arm.deployment, score=value, factors=factors))
        values.append(value)
    return Ranking(bandit.argmax_first(values), candidates)
