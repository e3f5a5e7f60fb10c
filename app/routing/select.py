"""Seed 000 §6-7 and §2-3: exclude what cannot be used, then rank what can.

``select`` is pure: route state, the request's identity and the policy in; the
ranked candidates, the exclusions with their reasons, the chosen arm and its
propensity out. Nothing here reads a clock or an unseeded generator.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from app.events import Candidate, Exclusion
from app.routing import bandit, breaker
from app.routing.policy import Arm, Policy
from app.routing.state import ArmState, BreakerPhase, RouteState
from app.settings import Strategy

ALGORITHM_VERSION = {
    Strategy.UCB1: "seed000-ucb1/1",
    Strategy.THOMPSON: "seed000-thompson/1",
}
#: Monte Carlo draws behind a Thompson decision's propensity (std. error <= 0.035).
PROPENSITY_DRAWS = 200


@dataclass(frozen=True, slots=True)
class Selection:
    chosen: Arm | None
    candidates: list[Candidate]
    excluded: list[Exclusion]
    propensity: float
    #: Arms whose breaker moved OPEN -> HALF_OPEN at this clock (to persist).
    arms: dict[str, ArmState]


def _exclusion_reason(
    arm: Arm, state: ArmState, tried: Collection[str], policy: Policy
) -> str | None:
    if arm.deployment in tried:
        return "already_tried"
    phase = state.breaker.state
    if phase is BreakerPhase.OPEN:
        return "breaker_open"
    if phase is BreakerPhase.HALF_OPEN:
        probes_left = policy.params.cb_half_open_max_calls - state.breaker.success_count
        if state.in_flight >= probes_left:
            return "breaker_half_open_probes_in_flight"
    if state.in_flight >= arm.provider.max_concurrency:
        return "concurrency_full"
    return None


def _rank_ucb1(
    eligible: Sequence[tuple[Arm, ArmState]], total_started: int, policy: Policy
) -> tuple[int, list[Candidate]]:
    params = policy.params
    candidates: list[Candidate] = []
    scores: list[float] = []
    first_untried: int | None = None
    for index, (arm, state) in enumerate(eligible):
        bonuses = {
            "cost_bonus": bandit.cost_bonus(arm.provider.bonus_cost_per_mtok, params.cost_weight),
            "latency_bonus": bandit.latency_bonus(state.avg_latency_s, params.latency_weight),
        }
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
    chosen = first_untried if first_untried is not None else bandit.argmax_first(scores)
    return chosen, candidates


def _rank_thompson(
    eligible: Sequence[tuple[Arm, ArmState]], request_id: str, attempt: int
) -> tuple[int, list[Candidate], float]:
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
    return chosen, candidates, propensity


def select(
    state: RouteState,
    route: str,
    request_id: str,
    attempt: int,
    tried: Collection[str],
    policy: Policy,
) -> Selection:
    arms = policy.arms(route)
    updated: dict[str, ArmState] = {}
    eligible: list[tuple[Arm, ArmState]] = []
    excluded: list[Exclusion] = []
    total_started = 0
    for arm in arms:
        arm_state = state.arm(arm.deployment)
        moved = breaker.on_clock(arm_state.breaker, state.clock, policy.breaker)
        if moved is not arm_state.breaker:
            arm_state = arm_state.model_copy(update={"breaker": moved})
            updated[arm.deployment] = arm_state
        total_started += arm_state.started
        reason = _exclusion_reason(arm, arm_state, tried, policy)
        if reason is None:
            eligible.append((arm, arm_state))
        else:
            excluded.append(Exclusion(deployment=arm.deployment, reason=reason))
    if not eligible:
        return Selection(None, [], excluded, 0.0, updated)
    if policy.params.strategy is Strategy.THOMPSON:
        index, candidates, propensity = _rank_thompson(eligible, request_id, attempt)
    else:
        index, candidates = _rank_ucb1(eligible, total_started, policy)
        propensity = 1.0
    return Selection(eligible[index][0], candidates, excluded, propensity, updated)
