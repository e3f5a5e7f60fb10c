"""The ``adaptive`` strategy: expected utility of an attempt, from priors and recent outcomes.

An attempt on a deployment is worth, in units of one accepted answer::

    value = p x (q - cost_usd / ADAPTIVE_ANSWER_VALUE_USD) - ADAPTIVE_WAIT_COST_PER_S x latency_s

``p`` is the deployment's success rate (the reliability accounting: 429
and client errors are neutral), ``q`` the share of its answers accepted (the
outcome's reward), ``latency_s`` the latency of its answers and ``cost_usd``
the reference workload (800 input + 250 output tokens) at its configured prices.
The highest value wins; ties go to config order.

Estimates start from the config and move only on evidence:

* ``q`` is the deployment's ``quality_prior`` (model, else provider; else
  ``ADAPTIVE_DEFAULT_QUALITY``) and ``p`` is ``ADAPTIVE_PRIOR_SUCCESS``, *until the
  outcomes contradict them* by more than ``ADAPTIVE_CHANGE_SIGMAS`` standard
  errors; then the outcomes' mean. A greedy choice on noisy means abandons the
  best deployment after a few unlucky answers and never comes back; a prior
  that holds within the noise does not.
* Outcomes are kept in two discounted memories on the route clock (each weighs
  ``2^(-age / half-life)``): ``slow`` (``ADAPTIVE_HALF_LIFE_S``, for ``p`` and ``q``)
  and ``fast`` (``ADAPTIVE_FAST_HALF_LIFE_S``). When the fast memory's rate differs
  from the slow one's beyond the same test, the slow one restarts from the fast
  one: a silent regression is followed within about a minute of traffic, not an hour.
* ``latency_s`` is the fast memory's mean latency of answers, with the configured
  ``p95_latency_baseline_ms`` as a prior worth ``ADAPTIVE_LATENCY_PRIOR_WEIGHT``
  answers (latency is precise: a few answers are enough, and drift is followed fast).
* Outages are the breaker's business: when a breaker closes again after its
  half-open probes, the failures that opened it are forgotten, so a recovered
  deployment competes on its merits at once.
* ``ADAPTIVE_EXPLORATION / sqrt(1 + recent answers)`` is added to the value: a
  deployment whose evidence has faded gets a little benefit of the doubt.

Everything is a pure function of the arm state, the route clock and the policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from app.routing.estimates import Quality
from app.routing.params import RoutingParams
from app.routing.policy import Arm, Policy
from app.routing.state import Recent, Sums


def _scaled(sums: Sums, factor: float) -> Sums:
    return Sums(
        calls=sums.calls * factor,
        failures=sums.failures * factor,
        answers=sums.answers * factor,
        reward=sums.reward * factor,
        latency_s=sums.latency_s * factor,
    )


def decayed(recent: Recent, now: float, params: RoutingParams) -> Recent:
    """Both memories as they weigh at ``now`` (a clock that goes back changes nothing)."""
    if now <= recent.at:
        return recent
    slow_weight, fast_weight = _factors(recent, now, params)
    return Recent(
        at=now, slow=_scaled(recent.slow, slow_weight), fast=_scaled(recent.fast, fast_weight)
    )


def _added(
    sums: Sums,
    factor: float | None,
    counted: bool,
    failed: bool,
    answered: bool,
    reward: float,
    latency_s: float,
) -> Sums:
    """``sums`` scaled by ``factor`` (None: as they are), plus one outcome: the same two
    roundings as ``_scaled`` then adding, without the intermediate sums."""
    calls, failures, answers = sums.calls, sums.failures, sums.answers
    rewards, latencies = sums.reward, sums.latency_s
    if factor is not None:
        calls, failures, answers = calls * factor, failures * factor, answers * factor
        rewards, latencies = rewards * factor, latencies * factor
    return Sums(  # positional, in field order: calls, failures, answers, reward, latency_s
        calls + float(counted),
        failures + float(counted and failed),
        answers + float(answered),
        rewards + (reward if answered else 0.0),
        latencies + (latency_s if answered else 0.0),
    )


def observe(
    recent: Recent,
    now: float,
    params: RoutingParams,
    *,
    counted: bool,
    failed: bool,
    answered: bool,
    reward: float,
    latency_s: float,
) -> Recent:
    """Add one outcome at ``now`` (``counted`` for availability, ``answered`` for a
    success) to both memories, then restart the slow one where the fast one shows a change."""
    if not counted and not answered:
        return decayed(recent, now, params)
    at, slow_weight, fast_weight = recent.at, None, None
    if now > recent.at:  # decayed(recent, now, params), fused with the additions
        at, (slow_weight, fast_weight) = now, _factors(recent, now, params)
    slow = _added(recent.slow, slow_weight, counted, failed, answered, reward, latency_s)
    fast = _added(recent.fast, fast_weight, counted, failed, answered, reward, latency_s)
    return Recent(at, _restarted(slow, fast, params), fast)


def _contradicts(reference: float, total: float, count: float, params: RoutingParams) -> bool:
    """Do ``count`` outcomes summing to ``total`` rule out the rate ``reference``?"""
    if count < params.adaptive_change_min_outcomes:
        return False
    rate = min(0.99, max(0.01, reference))
    error = math.sqrt(rate * (1.0 - rate) / count)
    return abs(total / count - reference) > params.adaptive_change_sigmas * error


def _changed(
    slow_total: float,
    slow_count: float,
    fast_total: float,
    fast_count: float,
    params: RoutingParams,
) -> bool:
    """Does the fast memory's rate differ from the slow one's beyond the noise?"""
    if slow_count <= fast_count:
        return False
    return _contradicts(slow_total / slow_count, fast_total, fast_count, params)


def _restarted(slow: Sums, fast: Sums, params: RoutingParams) -> Sums:
    """Change detection: a rate that moved (acceptance, failures) forgets its older history."""
    update: dict[str, float] = {}
    if _changed(slow.reward, slow.answers, fast.reward, fast.answers, params):
        update.update(answers=fast.answers, reward=fast.reward, latency_s=fast.latency_s)
    if _changed(slow.failures, slow.calls, fast.failures, fast.calls, params):
        update.update(calls=fast.calls, failures=fast.failures)
    return replace(slow, **update) if update else slow


def forget_failures(recent: Recent) -> Recent:
    """After an outage: the breaker closed again, the failures that opened it are spent."""
    return Recent(recent.at, _healed(recent.slow), _healed(recent.fast))


def _healed(sums: Sums) -> Sums:
    return Sums(sums.calls - sums.failures, 0.0, sums.answers, sums.reward, sums.latency_s)


@dataclass(frozen=True, slots=True)
class Estimate:
    success: float
    quality: float
    latency_s: float
    cost_usd: float
    exploration: float
    value: float

    def factors(self) -> dict[str, float]:
        return {
            "success_rate": self.success,
            "quality": self.quality,
            "latency_s": self.latency_s,
            "cost_usd": self.cost_usd,
            "exploration": self.exploration,
        }


def _tested(prior: float, total: float, count: float, params: RoutingParams) -> float:
    """The prior while the outcomes agree with it, their mean once they contradict it."""
    if _contradicts(prior, total, count, params):
        return total / count
    return prior


def _weighted(prior: float, weight: float, total: float, count: float) -> float:
    if weight + count <= 0.0:
        return prior
    return (prior * weight + total) / (weight + count)


def _factors(recent: Recent, now: float, params: RoutingParams) -> tuple[float, float]:
    """Weights of the slow and fast memories' sums at ``now``."""
    if now <= recent.at:
        return 1.0, 1.0
    age = now - recent.at
    return (
        0.5 ** (age / params.adaptive_half_life_s),
        0.5 ** (age / params.adaptive_fast_half_life_s),
    )


def _constants(arm: Arm, policy: Policy) -> tuple[float, float, float]:
    """A deployment's quality prior, latency prior (s) and workload cost: they depend on
    the policy alone (which never changes), so each is computed once per deployment."""
    cache = policy.memo.get("adaptive_constants")
    if cache is None:
        cache = policy.memo["adaptive_constants"] = {}
    found: tuple[float, float, float] | None = cache.get(arm.deployment)
    if found is None:
        params = policy.params
        configured = arm.provider.quality_prior_of(arm.model)
        quality_prior = (
            configured
            if params.adaptive_quality_priors and configured is not None
            else params.adaptive_default_quality
        )
        found = cache[arm.deployment] = (
            quality_prior,
            arm.provider.p95_latency_baseline_ms / 1000.0,
            arm.workload_cost_usd,
        )
    return found


def estimate(
    arm: Arm,
    recent: Recent,
    now: float,
    policy: Policy,
    cost_scale: float = 1.0,
    wait_scale: float = 1.0,
    *,
    cost_usd: float | None = None,
    graded: Quality | None = None,
    per_dollar: float | None = None,
) -> Estimate:
    """The deployment's expected value per attempt at ``now``, with its parts.

    ``cost_scale`` and ``wait_scale`` weigh the cost and waiting terms (a routing
    mode). Works on the sums and their decay factors directly (no model built: this
    runs for every candidate of every decision); equal to estimating from ``decayed``.
    ``cost_usd`` is the real cost estimate (the reference workload's if None),
    ``graded`` the graded quality (its optimistic bound is the value's quality, the
    margin its exploration), ``per_dollar`` the pacer's weight of a dollar
    (``1 / ADAPTIVE_ANSWER_VALUE_USD`` if None).
    """
    estimator = Estimator(now, policy, cost_scale, wait_scale, per_dollar)
    return estimator.estimate(arm, recent, cost_usd, graded)


class Estimator:
    """:func:`estimate` for every candidate of one decision: what depends on the decision
    alone (settings, mode scales, the pacer's weight) is read once."""

    __slots__ = (
        "answer_value",
        "cost_scale",
        "exploration",
        "fast_half_life",
        "latency_weight",
        "min_outcomes",
        "now",
        "params",
        "per_dollar",
        "policy",
        "prior_success",
        "slow_half_life",
        "wait",
    )

    def __init__(
        self,
        now: float,
        policy: Policy,
        cost_scale: float = 1.0,
        wait_scale: float = 1.0,
        per_dollar: float | None = None,
    ) -> None:
        params = policy.params
        self.now, self.policy, self.params = now, policy, params
        self.cost_scale, self.per_dollar = cost_scale, per_dollar
        # ``wait_scale * wait_cost * latency`` multiplies left to right: the same float.
        self.wait = wait_scale * params.adaptive_wait_cost_per_s
        self.answer_value = params.adaptive_answer_value_usd
        self.prior_success = params.adaptive_prior_success
        self.exploration = params.adaptive_exploration
        self.latency_weight = params.adaptive_latency_prior_weight
        self.min_outcomes = params.adaptive_change_min_outcomes
        self.slow_half_life = params.adaptive_half_life_s
        self.fast_half_life = params.adaptive_fast_half_life_s

    def estimate(
        self, arm: Arm, recent: Recent, cost_usd: float | None, graded: Quality | None
    ) -> Estimate:
        return Estimate(*self.parts(arm, recent, cost_usd, graded))

    def parts(
        self, arm: Arm, recent: Recent, cost_usd: float | None, graded: Quality | None
    ) -> tuple[float, float, float, float, float, float]:
        """:class:`Estimate`'s fields, in order (no object built per candidate)."""
        now = self.now
        if now <= recent.at:  # _factors
            slow_weight, fast_weight = 1.0, 1.0
        else:
            age = now - recent.at
            slow_weight = 0.5 ** (age / self.slow_half_life)
            fast_weight = 0.5 ** (age / self.fast_half_life)
        slow, fast = recent.slow, recent.fast
        quality_prior, latency_prior_s, workload_cost = _constants(arm, self.policy)
        calls = slow.calls * slow_weight
        answers = slow.answers * slow_weight
        success = self.prior_success
        if calls >= self.min_outcomes:  # else _tested keeps the prior
            success = _tested(success, calls - slow.failures * slow_weight, calls, self.params)
        if graded is None:
            quality = quality_prior
            if answers >= self.min_outcomes:
                quality = _tested(quality, slow.reward * slow_weight, answers, self.params)
            exploration = self.exploration / math.sqrt(1.0 + answers)
        else:
            quality, exploration = graded.mean, graded.bound - graded.mean
        latency_s = _weighted(
            latency_prior_s,
            self.latency_weight,
            fast.latency_s * fast_weight,
            fast.answers * fast_weight,
        )
        cost = workload_cost if cost_usd is None else cost_usd
        if self.per_dollar is None:
            cost_term = self.cost_scale * cost / self.answer_value
        else:
            cost_term = self.cost_scale * cost * self.per_dollar
        value = success * (quality - cost_term) - self.wait * latency_s + exploration
        return success, quality, latency_s, cost, exploration, value
