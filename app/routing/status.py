"""Deployment status (models demoted for their status, and beta or alpha channels):
a model of ``providers.yaml`` is ``active`` (the default),
``demoted`` or ``preview``.

* ``preview``: a candidate only when the route (``routes.NAME.preview: true``) or the
  request (``routing.preview: true``) opts in, or the request pins it
  (``provider:model`` names it deliberately); otherwise excluded before ranking,
  traced ``preview_not_opted_in``, whatever made the plan.
* ``demoted``: a candidate only when no active one can take the attempt now: among
  the candidates eligible at selection (breakers, concurrency, Retry-After, already
  tried), the demoted ones are excluded, traced ``demoted``, as long as an active or
  preview one is left. A decision that chose a demoted deployment shows every other
  candidate excluded with its reason.

Pure: the policy's config and the request in, the arms kept and the exclusions out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from app.config.providers import deployment_id
from app.contract import ErrorBody, Exclusion, RequestAccepted
from app.routing.policy import Arm, Policy
from app.routing.state import ArmState

PREVIEW_EXCLUDED = "preview_not_opted_in"
DEMOTED_EXCLUDED = "demoted"


def _statuses(policy: Policy) -> tuple[frozenset[str], frozenset[str]]:
    """The policy's demoted and preview deployments (computed once per policy)."""
    key = ("deployment_statuses",)
    found = policy.memo.get(key)
    if found is None:
        demoted: set[str] = set()
        preview: set[str] = set()
        for provider in policy.config.providers:
            for spec in provider.models:
                if spec.status == "demoted":
                    demoted.add(deployment_id(provider.id, spec.name))
                elif spec.status == "preview":
                    preview.add(deployment_id(provider.id, spec.name))
        found = policy.memo[key] = (frozenset(demoted), frozenset(preview))
    return cast(tuple[frozenset[str], frozenset[str]], found)


def opted_in(accepted: RequestAccepted, policy: Policy) -> bool:
    """Whether the request may use preview deployments: its route or itself opts in,
    or it pins one."""
    if accepted.pinned:
        return True
    routing = accepted.request.routing
    if routing is not None and routing.preview:
        return True
    route = policy.config.routes.get(accepted.route)
    return route is not None and route.preview


def split_preview(
    arms: Iterable[Arm], accepted: RequestAccepted, policy: Policy
) -> tuple[list[Arm], list[Exclusion]]:
    """The arms the request may use, and a ``preview_not_opted_in`` exclusion for each
    preview deployment it did not opt in to."""
    arms = list(arms)
    preview = _statuses(policy)[1]
    if not preview or opted_in(accepted, policy):
        return arms, []
    kept = [arm for arm in arms if arm.deployment not in preview]
    out = [
        Exclusion(deployment=arm.deployment, reason=PREVIEW_EXCLUDED)
        for arm in arms
        if arm.deployment in preview
    ]
    return kept, out


def preview_refusal(out: Iterable[Exclusion]) -> ErrorBody:
    """The 400 of a request whose only candidates are preview deployments."""
    names = ", ".join(e.deployment for e in out)
    return ErrorBody(
        type="invalid_request",
        message=f"only preview deployments could serve this request ({names}): "
        "opt in with routing.preview",
        code="no_candidate",
        http_status=400,
    )


def split_demoted(
    eligible: list[tuple[Arm, ArmState]], policy: Policy
) -> tuple[list[tuple[Arm, ArmState]], list[Exclusion]]:
    """The eligible arms without the demoted ones while any other is eligible, and a
    ``demoted`` exclusion for each left out (all kept when none is active)."""
    demoted = _statuses(policy)[0]
    if not demoted:
        return eligible, []
    active = [pair for pair in eligible if pair[0].deployment not in demoted]
    if not active or len(active) == len(eligible):
        return eligible, []
    out = [
        Exclusion(deployment=arm.deployment, reason=DEMOTED_EXCLUDED)
        for arm, _ in eligible
        if arm.deployment in demoted
    ]
    return active, out
