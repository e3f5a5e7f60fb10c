"""Ranking strategies: given the eligible arms in config order, score them and pick one.

Each returns every candidate's score with its per-factor contributions, the
chosen index, and the propensity of that choice under the strategy (1.0 for a
deterministic argmax/argmin; Thompson's integrated, app/routing/propensity.py).
Thompson's draws come from generators seeded by the request id and attempt, so a
replay draws the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from app.contract import Candidate
from app.contract.mode import RoutingMode
from app.routing import adaptive, bandit, context, estimates, tail
from app.routing.capabilities import Needs, model_spec
from app.routing.learning import NO_LEARNING, Learning
from app.routing.params import Strategy
from app.routing.policy import WORKLOAD_INPUT_TOKENS, WORKLOAD_OUTPUT_TOKENS, Arm, Policy
from app.routing.propensity import thompson_propensity
from app.routing.records import record
from app.routing.state import ArmState
from app.understanding.modes import (
    DEFAULT_MODE,
    MODE_WEIGHTS,
    ModeWeights,
    throughput_bonus,
)

ALGORITHM_VERSION = {
    Strategy.UCB1: "seed000-ucb1/2",
    Strategy.THOMPSON: "seed000-thompson/3",
    Strategy.COMPOSITE: "seed003-composite/3",
    Strategy.ADAPTIVE: "switchyard-adaptive/2",
}
#: Thompson with the fractional Beta update from grades (THOMPSON_FRACTIONAL).
#: /3: the propensity is integrated (app/routing/propensity.py), not 200 draws.
THOMPSON_FRACTIONAL_VERSION = "seed000-thompson-fractional/3"

Eligible = Sequence[tuple[Arm, ArmState]]


@record
class Ranking:
    chosen: int
    candidates: list[Candidate]
    propensity: float = 1.0
    rule: str = "score"
    #: The context bucket the chosen deployment's quality estimate came from.
    level: str = context.EVERYTHING


#: Validates a candidate from its fields, as ``Candidate(...)`` does, without the Python
#: ``__init__`` frame (``model_construct`` is slower still: 1.4 vs 1.0 vs 0.7 µs).
_validate_candidate = Candidate.__pydantic_validator__.validate_python


def _candidate(deployment: str, score: float | None, factors: dict[str, float]) -> Candidate:
    candidate: Candidate = _validate_candidate(
        {"deployment": deployment, "score": score, "factors": factors}
    )
    return candidate


_object_new, _object_setattr = object.__new__, object.__setattr__


def _float_candidate(deployment: str, score: float | None, factors: dict[str, float]) -> Candidate:
    """:func:`_candidate` without validation, for a ``str`` deployment, a float (or None)
    score and a fresh dict of floats (UCB1's, composite's and adaptive's: every value is
    a float by construction, each a product or quotient of floats):
    what validating them builds, the same fields and fields-set (0.4 vs 0.7 µs;
    tests/test_trusted_candidates.py compares each with its validated twin)."""
    built: Candidate = _object_new(Candidate)
    fields = {"deployment": deployment, "score": score, "factors": factors}
    _object_setattr(built, "__dict__", fields)
    _object_setattr(built, "__pydantic_fields_set__", {"deployment", "score", "factors"})
    _object_setattr(built, "__pydantic_extra__", None)
    _object_setattr(built, "__pydantic_private__", None)
    return built


def algorithm_version(policy: Policy) -> str:
    params = policy.params
    if params.strategy is Strategy.THOMPSON and params.thompson_fractional:
        return THOMPSON_FRACTIONAL_VERSION
    return ALGORITHM_VERSION[params.strategy]


def _qualities(eligible: Eligible, learning: Learning, policy: Policy) -> list[estimates.Quality]:
    """Each candidate's graded quality in the request's buckets (empty: no grade on the route)."""
    states = [state for _, state in eligible]
    if not estimates.graded_route(states):
        return []
    rate = estimates.coverage(states)
    return [
        estimates.quality(state, learning.chain, _quality_prior(arm, policy), rate, policy.params)
        for arm, state in eligible
    ]


def _quality_prior(arm: Arm, policy: Policy) -> float:
    params = policy.params
    configured = arm.provider.quality_prior_of(arm.model)
    if params.adaptive_quality_priors and configured is not None:
        return configured
    return params.adaptive_default_quality


def _costs(eligible: Eligible, learning: Learning, policy: Policy) -> list[float]:
    """Each candidate's expected real cost of an answer to this request."""
    if not any(state.evidence for _, state in eligible):
        # Nothing observed on the route: every cost is the configured prices at the reference
        # workload (token_means and cost's first exit), which the policy alone fixes.
        cache = policy.memo.get("workload_costs")
        if cache is None:
            cache = policy.memo["workload_costs"] = {}
        costs = []
        for arm, _ in eligible:
            found = cache.get(arm.deployment)
            if found is None:
                workload = (float(WORKLOAD_INPUT_TOKENS), float(WORKLOAD_OUTPUT_TOKENS))
                found = cache[arm.deployment] = estimates.priced(arm, workload)
            costs.append(found)
        return costs
    tokens = estimates.token_means(state for _, state in eligible)
    return [estimates.cost(arm, state, learning.chain, tokens) for arm, state in eligible]


def _with_level(ranking: Ranking, qualities: list[estimates.Quality]) -> Ranking:
    if not qualities:
        return ranking
    level = qualities[ranking.chosen].level
    return Ranking(ranking.chosen, ranking.candidates, ranking.propensity, ranking.rule, level)


def rank(
    eligible: Eligible,
    total_started: int,
    request_id: str,
    attempt: int,
    policy: Policy,
    mode: RoutingMode = DEFAULT_MODE,
    now: float = 0.0,
    learning: Learning = NO_LEARNING,
) -> Ranking:
    strategy = policy.params.strategy
    qualities = _qualities(eligible, learning, policy)
    if strategy is Strategy.THOMPSON:
        ranking = thompson(eligible, request_id, attempt, qualities, policy)
    elif strategy is Strategy.COMPOSITE:
        ranking = composite(
            eligible, qualities, _costs(eligible, learning, policy), mode, learning.needs
        )
    elif strategy is Strategy.ADAPTIVE:
        ranking = adaptive_ranking(eligible, now, policy, mode, learning, qualities)
    else:
        ranking = ucb1(eligible, total_started, policy, mode, qualities)
    return _with_level(ranking, qualities)


def mode_weights(mode: RoutingMode, policy: Policy) -> ModeWeights:
    """The bonus weights of each routing mode (docs/design.md#composite-score-modes-adaptive);
    ``balanced`` keeps the environment's weights."""
    if mode is not RoutingMode.BALANCED:
        return MODE_WEIGHTS[mode]
    found = policy.memo.get("balanced_weights")  # the policy alone fixes them
    if found is None:
        params = policy.params
        found = policy.memo["balanced_weights"] = ModeWeights(
            cost=params.cost_weight, latency=params.latency_weight
        )
    weights: ModeWeights = found
    return weights


def cost_per_mtok(arm: Arm, state: ArmState, graded: bool) -> float:
    """The $/1M of a deployment's cost bonus: the configured figure (or the table by id
    prefix); on a graded route, what its answers really cost per token once it has answered."""
    seen = state.evidence.get(context.EVERYTHING)
    if not graded or seen is None or seen.tokens_in + seen.tokens_out <= 0:
        return arm.provider.bonus_cost_per_mtok
    return seen.cost_usd / (seen.tokens_in + seen.tokens_out) * 1_000_000


def _bonuses(
    arm: Arm, state: ArmState, weights: ModeWeights, graded: bool = False
) -> dict[str, float]:
    bonuses = {
        "cost_bonus": bandit.cost_bonus(cost_per_mtok(arm, state, graded), weights.cost),
        "latency_bonus": bandit.latency_bonus(state.avg_latency_s, weights.latency),
    }
    if weights.throughput > 0:
        bonuses["throughput_bonus"] = throughput_bonus(state.tokens_per_s, weights.throughput)
    return bonuses


def _fixed_cost_bonuses(policy: Policy, weight: float) -> dict[str, float]:
    """Per deployment, the cost bonus from its configured $/1M at this weight (the policy
    never changes: computed once per deployment and weight)."""
    key = ("ucb1_cost_bonus", weight)
    found = policy.memo.get(key)
    if found is None:
        found = policy.memo[key] = {}
    bonuses: dict[str, float] = found
    return bonuses


def ucb1(
    eligible: Eligible,
    total_started: int,
    policy: Policy,
    mode: RoutingMode = DEFAULT_MODE,
    qualities: Sequence[estimates.Quality] = (),
) -> Ranking:
    """UCB1 (docs/design.md#ucb1-and-thompson-sampling); with grades on the route, the mean
    reward is the success rate times the graded quality.

    The bonuses are :func:`_bonuses` and the exploration term
    :func:`app.routing.bandit.exploration_term`, inlined (the same float operations in
    the same order: a replay reproduces every score bit for bit)."""
    weights = mode_weights(mode, policy)
    graded = bool(qualities)
    fixed = _fixed_cost_bonuses(policy, weights.cost)
    latency_weight, throughput_weight = weights.latency, weights.throughput
    c = policy.params.exploration_bonus
    # exploration_term(c, N, n) = c * sqrt(ln N / n), 0 when N <= 1 (n > 0 here).
    log_total = math.log(total_started) if total_started > 1 else None
    candidates: list[Candidate] = []
    scores: list[float] = []
    first_untried: int | None = None
    for index, (arm, state) in enumerate(eligible):
        cost = None if graded else fixed.get(arm.deployment)
        if cost is None:
            cost = bandit.cost_bonus(cost_per_mtok(arm, state, graded), weights.cost)
            if not graded:
                fixed[arm.deployment] = cost
        latency = max(0.0, 1.0 - state.avg_latency_s / bandit.LATENCY_SCALE_S) * latency_weight
        started = state.pulls + state.in_flight
        if started == 0:
            # An arm never pulled is chosen before the formula applies.
            first_untried = index if first_untried is None else first_untried
            factors = {"cost_bonus": cost, "latency_bonus": latency}
            if throughput_weight > 0:
                factors["throughput_bonus"] = throughput_bonus(
                    state.tokens_per_s, throughput_weight
                )
            candidates.append(_float_candidate(arm.deployment, None, factors))
            scores.append(0.0)
            continue
        mean = state.mean_reward
        if graded:
            mean = estimates.success_rate(state) * qualities[index].mean
        exploration = 0.0 if log_total is None else c * math.sqrt(log_total / started)
        # sum() of the bonuses starts from 0: 0 + cost keeps -0.0 out, as before.
        if throughput_weight > 0:
            throughput = throughput_bonus(state.tokens_per_s, throughput_weight)
            factors = {
                "mean_reward": mean,
                "exploration": exploration,
                "cost_bonus": cost,
                "latency_bonus": latency,
                "throughput_bonus": throughput,
            }
            score = mean + exploration + (0 + cost + latency + throughput)
        else:
            factors = {
                "mean_reward": mean,
                "exploration": exploration,
                "cost_bonus": cost,
                "latency_bonus": latency,
            }
            score = mean + exploration + (0 + cost + latency)
        candidates.append(_float_candidate(arm.deployment, score, factors))
        scores.append(score)
    if first_untried is not None:
        return Ranking(first_untried, candidates, rule="untried_first")
    return Ranking(bandit.argmax_first(scores), candidates)


def thompson(
    eligible: Eligible,
    request_id: str,
    attempt: int,
    qualities: Sequence[estimates.Quality] = (),
    policy: Policy | None = None,
) -> Ranking:
    """Thompson sampling; with grades on the route, each Beta posterior counts the graded
    answers of its bucket (success when the grade is >= 0.5, or fractional) and the failed
    calls."""
    fractional = policy is not None and policy.params.thompson_fractional
    posteriors = [
        estimates.thompson_params(state, qualities[i].level, fractional)
        if qualities
        else (state.alpha, state.beta)
        for i, (_, state) in enumerate(eligible)
    ]
    samples = bandit.thompson_draws(posteriors, bandit.seeded_rng("thompson", request_id, attempt))
    chosen = bandit.argmax_first(samples)
    propensity = thompson_propensity(posteriors, chosen)
    candidates = [
        _candidate(arm.deployment, sample, {"alpha": alpha, "beta": beta, "sample": sample})
        for (arm, _), (alpha, beta), sample in zip(eligible, posteriors, samples, strict=True)
    ]
    return Ranking(chosen, candidates, propensity)


def composite(
    eligible: Eligible,
    qualities: Sequence[estimates.Quality] = (),
    costs: Sequence[float] = (),
    mode: RoutingMode = DEFAULT_MODE,
    needs: Needs | None = None,
) -> Ranking:
    """The composite score: ``cost x (ewma_latency / p95_baseline)^2 x (1 + 10 x
    ewma_failure)``, times ``(1 + 10 x (1 - quality))`` once the route has grades.

    In ``balanced`` mode (reliability, latency, tail latency, price, token
    fit), times ``tail_latency_penalty`` and ``token_fit_penalty``
    (:mod:`app.routing.tail`), each traced as a factor: its multiplier is its
    contribution to the product.

    Lowest wins; ties go to config order. An arm with no latency sample yet
    scores 0, so each arm is tried before the EWMAs steer. Cost is the real mean
    cost of an answer (app/routing/estimates.py), the reference workload's before any.
    """
    candidates: list[Candidate] = []
    negated: list[float] = []
    balanced = mode is RoutingMode.BALANCED
    for index, (arm, state) in enumerate(eligible):
        factors = {
            "cost_usd": costs[index] if costs else arm.workload_cost_usd,
            "latency_penalty": (state.ewma_latency_ms / arm.provider.p95_latency_baseline_ms) ** 2,
            "failure_penalty": 1.0 + 10.0 * state.ewma_failure,
        }
        if qualities:
            factors["quality_penalty"] = 1.0 + 10.0 * (1.0 - qualities[index].mean)
        if balanced:
            factors["tail_latency_penalty"] = tail.tail_penalty(
                state.ewma_p95_ms, arm.provider.p95_latency_baseline_ms
            )
            factors["token_fit_penalty"] = tail.fit_penalty(tail.fill(model_spec(arm), needs))
        score = math.prod(factors.values())
        candidates.append(_float_candidate(arm.deployment, score, factors))
        negated.append(-score)
    return Ranking(bandit.argmax_first(negated), candidates)


def adaptive_ranking(
    eligible: Eligible,
    now: float,
    policy: Policy,
    mode: RoutingMode = DEFAULT_MODE,
    learning: Learning = NO_LEARNING,
    qualities: Sequence[estimates.Quality] = (),
) -> Ranking:
    """:mod:`app.routing.adaptive`: the highest expected value per attempt wins.

    A mode scales the cost and waiting terms as the modes scale UCB1's cost and
    latency bonuses against ``balanced`` (price: cost x3, waiting x1/3; quality: only
    success and acceptance count ...) and adds ``throughput``'s tokens/s bonus.
    Cost is the real cost of an answer in the request's buckets, weighed by
    the budget pacer's multiplier when a cost target applies; once the route has
    grades, quality is the graded bound, and a deployment never tried is tried first.
    """
    weights, balanced = MODE_WEIGHTS[mode], MODE_WEIGHTS[RoutingMode.BALANCED]
    cost_scale = weights.cost / balanced.cost
    wait_scale = weights.latency / balanced.latency
    costs = _costs(eligible, learning, policy)
    per_dollar = None
    if learning.multiplier is not None and learning.target_usd is not None:
        per_dollar = learning.multiplier / learning.target_usd
    candidates: list[Candidate] = []
    values: list[float] = []
    estimate = adaptive.Estimator(now, policy, cost_scale, wait_scale, per_dollar).parts
    for index, (arm, state) in enumerate(eligible):
        success, quality, latency_s, cost, exploration, value = estimate(
            arm, state.recent, costs[index], qualities[index] if qualities else None
        )
        factors = {  # adaptive.Estimate.factors()
            "success_rate": success,
            "quality": quality,
            "latency_s": latency_s,
            "cost_usd": cost,
            "exploration": exploration,
        }
        if weights.throughput > 0:
            factors["throughput_bonus"] = throughput_bonus(state.tokens_per_s, weights.throughput)
            value += factors["throughput_bonus"]
        candidates.append(_float_candidate(arm.deployment, value, factors))
        values.append(value)
    if qualities:
        untried = [i for i, (_, state) in enumerate(eligible) if state.started == 0]
        if untried:
            return Ranking(untried[0], candidates, rule="untried_first")
    return Ranking(bandit.argmax_first(values), candidates)
