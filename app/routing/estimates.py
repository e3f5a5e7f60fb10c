"""What every strategy learns from grades and real cost, per context bucket.

Quality. The quality of a deployment's answers is the weighted mean of their
grades. Buckets are walked from ``*`` towards the request's finest one
(:func:`app.routing.context.levels`); a finer bucket is used only once it holds
``CONTEXT_MIN_GRADES`` grades, and its mean is shrunk towards the coarser one's
(worth ``CONTEXT_PRIOR_WEIGHT`` grades); ``*`` is shrunk towards the quality
prior (the config's ``quality_prior`` or ``ADAPTIVE_DEFAULT_QUALITY``, worth one
grade). The optimistic bound adds ``QUALITY_EXPLORATION x sd / sqrt(evidence)``,
capped at 1, where the evidence counts the answers still waiting for a grade at
the route's observed grading rate (grades arrive late: a deployment whose answers
are on their way is not tried again and again meanwhile).

Answers without a grade: they count for availability (the success signal) and
are taken to be as good as the deployment's graded answers; a route that has no
grade at all keeps the success signal (the outcome's reward) as quality.

Cost. The mean real cost (``cost_usd`` of its answers) of the deployment, walked
from ``*`` to the finest bucket the same way (each bucket shrunk towards the
coarser one by ``COST_PRIOR_WEIGHT`` answers); before any answer, its configured
prices times the route's observed token means (the reference workload, 800 input and
250 output tokens, before anything was observed: docs/design.md#the-reference-providers).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.routing import context, evidence
from app.routing.params import RoutingParams
from app.routing.policy import WORKLOAD_INPUT_TOKENS, WORKLOAD_OUTPUT_TOKENS, Arm
from app.routing.state import NO_EVIDENCE, ArmState, Evidence

#: Answers behind a grading rate of 1 before grades are seen (pending answers count).
COVERAGE_PRIOR = 20.0
#: Pseudo-answers of the coarser bucket's (or the price's) mean cost in a bucket's.
COST_PRIOR_WEIGHT = 3.0
#: Pseudo-grades of the quality prior, and of the prior spread.
QUALITY_PRIOR_WEIGHT = 1.0
SPREAD_PRIOR_WEIGHT = 2.0


@dataclass(frozen=True, slots=True)
class Quality:
    mean: float
    bound: float
    #: The bucket the estimate came from, and the evidence behind it (pseudo-grades included).
    level: str
    evidence: float


def graded_route(states: Iterable[ArmState]) -> bool:
    """Has any of these deployments been graded? (Otherwise: the success signal.)"""
    for state in states:  # a loop, not any(): on every decision, and mostly no evidence
        if state.evidence and state.evidence.get(context.EVERYTHING, NO_EVIDENCE).weight > 0:
            return True
    return False


def coverage(states: Iterable[ArmState]) -> float:
    """Share of answers that get a grade, as seen so far (1 before any answer)."""
    sums = evidence.total((s.evidence for s in states), context.EVERYTHING)
    return min(1.0, (sums.graded + COVERAGE_PRIOR) / (sums.answers + COVERAGE_PRIOR))


def _spread(found: Evidence, prior_sd: float) -> float:
    if found.weight <= 0:
        return prior_sd
    mean = found.score / found.weight
    variance = max(0.0, found.square / found.weight - mean * mean)
    pooled = (SPREAD_PRIOR_WEIGHT * prior_sd**2 + found.weight * variance) / (
        SPREAD_PRIOR_WEIGHT + found.weight
    )
    return math.sqrt(pooled)


def quality(
    state: ArmState, chain: Sequence[str], prior: float, rate: float, params: RoutingParams
) -> Quality:
    """Graded quality of one deployment in the request's buckets (``chain``, finest first)."""
    mean, level = prior, context.EVERYTHING
    found = state.evidence.get(context.EVERYTHING, NO_EVIDENCE)
    weight = QUALITY_PRIOR_WEIGHT
    for key in reversed(chain):
        bucket = state.evidence.get(key, NO_EVIDENCE)
        if key != context.EVERYTHING and bucket.weight < params.context_min_grades:
            break
        weight = QUALITY_PRIOR_WEIGHT if key == context.EVERYTHING else params.context_prior_weight
        mean = (weight * mean + bucket.score) / (weight + bucket.weight)
        level, found = key, bucket
    pending = max(0, found.answers - found.graded)
    count = weight + found.weight + pending * rate
    spread = _spread(found, params.quality_prior_sd)
    bound = min(1.0, mean + params.quality_exploration * spread / math.sqrt(count))
    return Quality(mean, max(mean, bound), level, count)


def thompson_params(state: ArmState, level: str, fractional: bool) -> tuple[float, float]:
    """Beta posterior from the grades of ``level``, plus the failed calls as misses."""
    found = state.evidence.get(level, NO_EVIDENCE)
    failures = max(0.0, state.pulls - state.total_reward)
    hits = found.score if fractional else found.wins
    return 1.0 + hits, 1.0 + max(0.0, found.weight - hits) + failures


def token_means(states: Iterable[ArmState]) -> tuple[float, float]:
    """Mean input and output tokens of the route's answers (the reference workload before any)."""
    sums = evidence.total((s.evidence for s in states), context.EVERYTHING)
    if sums.costed == 0:
        return float(WORKLOAD_INPUT_TOKENS), float(WORKLOAD_OUTPUT_TOKENS)
    return sums.tokens_in / sums.costed, sums.tokens_out / sums.costed


def priced(arm: Arm, tokens: tuple[float, float]) -> float:
    provider = arm.provider
    return (tokens[0] * provider.input_price + tokens[1] * provider.output_price) / 1_000_000


def cost(arm: Arm, state: ArmState, chain: Sequence[str], tokens: tuple[float, float]) -> float:
    """Expected dollars of one answer of this deployment for this request."""
    if not state.evidence:  # nothing observed: the configured prices (the loop's first exit)
        return priced(arm, tokens)
    mean, weight = priced(arm, tokens), COST_PRIOR_WEIGHT
    for key in reversed(chain):
        bucket = state.evidence.get(key)
        if bucket is None or bucket.costed == 0:
            if key == context.EVERYTHING:
                return mean
            break
        prior = 1.0 if key == context.EVERYTHING else weight
        mean = (prior * mean + bucket.cost_usd) / (prior + bucket.costed)
    return mean


def success_rate(state: ArmState) -> float:
    """The success signal: the outcome rewards' mean (1.0 before any outcome)."""
    return state.total_reward / state.pulls if state.pulls else 1.0
