"""Per-context evidence of a deployment: answers, quality grades, real cost.

Pure updates of :class:`app.routing.state.Evidence` in every bucket of a context
(:mod:`app.routing.context`), plus the spend of a tenant that has a cost target.
Availability (breaker, reliability accounting) is not touched here.

* An outcome: a successful answer counts in ``answers`` and, with its real
  ``cost_usd`` and tokens, in the cost sums (failed attempts cost nothing by
  the reliability accounting and say nothing of quality); ``expired`` changes nothing.
* A grade (``GradeApplied``): its weighted score joins the grade sums; when it
  replaces an earlier grade of the same source, the earlier one is taken back
  (the answer stays counted once in ``graded``).

The number of buckets per deployment is bounded (``CONTEXT_MAX_KEYS``): past it,
the bucket with the least evidence goes first (ties: the greatest key), never
``*`` nor a tenant's spend.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from app.contract import GradeApplied, Outcome, StatusClass
from app.routing import context
from app.routing.bandit import THOMPSON_SUCCESS_THRESHOLD
from app.routing.policy import Policy
from app.routing.state import NO_EVIDENCE, Evidence

Buckets = dict[str, Evidence]


def _keys(key: str | None, policy: Policy) -> tuple[str, ...]:
    if not policy.params.context_learning:
        return (context.EVERYTHING,)
    return context.levels(key)


def _tenant_spend(key: str | None, route: str, policy: Policy) -> tuple[str, ...]:
    tenant = context.tenant_of(key)
    if tenant is None:
        return ()
    preset = policy.config.tenants.get(tenant)
    if preset is None or preset.cost_target_usd is None:
        return ()
    return (context.tenant_scope(tenant),)


def observe_outcome(buckets: Buckets, outcome: Outcome, policy: Policy) -> Buckets:
    """The buckets with one attempt's answer and cost counted."""
    if outcome.status_class is not StatusClass.SUCCESS:
        return buckets
    keys = (
        *_keys(outcome.context, policy),
        *_tenant_spend(outcome.context, outcome.route, policy),
    )
    updated = dict(buckets)
    for key in keys:
        old = buckets.get(key) or NO_EVIDENCE
        updated[key] = Evidence(  # positional, in field order: answers ... tokens_out
            old.answers + 1,
            old.graded,
            old.weight,
            old.score,
            old.square,
            old.wins,
            old.costed + 1,
            old.cost_usd + outcome.cost_usd,
            old.tokens_in + outcome.tokens_in,
            old.tokens_out + outcome.tokens_out,
        )
    return bounded(updated, policy.params.context_max_keys)


def observe_grade(buckets: Buckets, grade: GradeApplied, policy: Policy) -> Buckets:
    """The buckets with ``grade`` counted and the grade it replaces taken back."""
    updated = dict(buckets)
    for key in _keys(grade.context, policy):
        updated[key] = graded(buckets.get(key) or NO_EVIDENCE, grade)
    return bounded(updated, policy.params.context_max_keys)


def _win(score: float) -> float:
    return 1.0 if score >= THOMPSON_SUCCESS_THRESHOLD else 0.0


def graded(evidence: Evidence, grade: GradeApplied) -> Evidence:
    """One bucket with ``grade`` in (and the grade it replaces out)."""
    weight, score = grade.weight, grade.score
    count = evidence.graded
    total = evidence.weight + weight
    scored = evidence.score + weight * score
    square = evidence.square + weight * score * score
    wins = evidence.wins + weight * _win(score)
    old_score, old_weight = grade.replaces_score, grade.replaces_weight
    if old_score is None:
        count += 1
    else:
        old_weight = old_weight if old_weight is not None else 1.0
        total = max(0.0, total - old_weight)
        scored = max(0.0, scored - old_weight * old_score)
        square = max(0.0, square - old_weight * old_score * old_score)
        wins = max(0.0, wins - old_weight * _win(old_score))
    return replace(evidence, graded=count, weight=total, score=scored, square=square, wins=wins)


def _protected(key: str) -> bool:
    return key == context.EVERYTHING or key.startswith(context.TENANT_PREFIX)


def _size(evidence: Evidence) -> float:
    return evidence.answers + evidence.weight


def bounded(buckets: Buckets, max_keys: int) -> Buckets:
    """At most ``max_keys`` evictable buckets: those with the least evidence go first."""
    if len(buckets) <= max_keys:  # fewer buckets than the bound: nothing to evict
        return buckets
    evictable = [k for k in buckets if not _protected(k)]
    if len(evictable) <= max_keys:
        return buckets
    ranked = sorted(evictable, key=lambda k: (-_size(buckets[k]), k))
    dropped = set(ranked[max_keys:])
    return {k: v for k, v in buckets.items() if k not in dropped}


def total(buckets: Iterable[Buckets], key: str) -> Evidence:
    """One bucket summed over deployments (a route's or a tenant's totals)."""
    sums = Evidence()
    for arm in buckets:
        found = arm.get(key)
        if found is None:
            continue
        sums = Evidence(
            answers=sums.answers + found.answers,
            graded=sums.graded + found.graded,
            weight=sums.weight + found.weight,
            score=sums.score + found.score,
            square=sums.square + found.square,
            wins=sums.wins + found.wins,
            costed=sums.costed + found.costed,
            cost_usd=sums.cost_usd + found.cost_usd,
            tokens_in=sums.tokens_in + found.tokens_in,
            tokens_out=sums.tokens_out + found.tokens_out,
        )
    return sums
