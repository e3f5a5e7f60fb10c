"""Data rules and price caps: the deployments a request may reach, whatever the path.

A route, the request's tenant (its preset) and the request itself may each require
regions, zero data retention (``zdr``), no training on the data
(``data_collection: deny``) and certifications; the request may cap prices
(``provider.max_price``). Requirements only add up: the regions allowed are those all
of them allow, ``zdr`` and ``deny`` hold when any asks. A deployment that declares
nothing about a rule asked for does not meet it. The filter runs on every candidate
plan — pins, local-first, the auto router, a dynamic route's model or fallback model,
a retry — after the plan is made and before selection, so no path escapes it; each
deployment left out is traced with the rule, and a request no deployment may serve
is refused (403, naming the rules) before any call.

Pure: the request as accepted and the policy in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.config.providers import ProviderConfig
from app.config.schema import TenantPolicy
from app.contract import ErrorBody, Exclusion, RequestAccepted
from app.routing.policy import Arm, Policy
from app.routing.presets import applying


@dataclass(frozen=True, slots=True)
class Rules:
    regions: frozenset[str] | None = None
    zdr: bool = False
    deny_collection: bool = False
    certifications: frozenset[str] = frozenset()
    max_prompt_usd: float | None = None
    max_completion_usd: float | None = None

    @property
    def any(self) -> bool:
        return (
            self.regions is not None
            or self.zdr
            or self.deny_collection
            or bool(self.certifications)
            or self.max_prompt_usd is not None
            or self.max_completion_usd is not None
        )


NO_RULES = Rules()
NO_TENANT = TenantPolicy()


def rules_of(accepted: RequestAccepted, policy: Policy) -> Rules:
    """The route's, the tenant's and the request's requirements, added up."""
    config = policy.config
    route = config.routes.get(accepted.route)
    name = accepted.request.tenant
    tenant = config.tenants.get(name, NO_TENANT) if name else NO_TENANT
    asked = accepted.request.provider
    presets = applying(config, accepted.request)
    regions: frozenset[str] | None = None
    for allowed in (
        route.regions if route else None,
        tenant.regions,
        *(p.regions for p in presets),
        asked.regions if asked else None,
    ):
        if allowed is not None:
            regions = frozenset(allowed) if regions is None else regions & frozenset(allowed)
    price = asked.max_price if asked else None
    return Rules(
        regions=regions,
        zdr=bool(route and route.zdr)
        or tenant.zdr
        or any(p.zdr for p in presets)
        or bool(asked and asked.zdr),
        deny_collection="deny"
        in {
            route.data_collection if route else "allow",
            tenant.data_collection,
            *(p.data_collection for p in presets),
            asked.data_collection if asked else "allow",
        },
        certifications=frozenset(
            [
                *(route.certifications if route else []),
                *tenant.certifications,
                *(c for p in presets for c in p.certifications),
            ]
        ),
        max_prompt_usd=price.prompt if price else None,
        max_completion_usd=price.completion if price else None,
    )


def breaks(provider: ProviderConfig, rules: Rules) -> str | None:
    """The first rule ``provider`` does not meet (None: it meets them all)."""
    if rules.regions is not None and provider.region not in rules.regions:
        return "region_not_allowed"
    if rules.zdr and provider.data_retention != "none":
        return "retains_data"
    if rules.deny_collection and provider.trains_on_data is not False:
        return "may_train_on_data"
    if not rules.certifications <= set(provider.certifications):
        return "lacks_certification"
    if rules.max_prompt_usd is not None and provider.input_price > rules.max_prompt_usd:
        return "over_max_prompt_price"
    if rules.max_completion_usd is not None and provider.output_price > rules.max_completion_usd:
        return "over_max_completion_price"
    return None


def split_allowed(
    arms: Iterable[Arm], accepted: RequestAccepted, policy: Policy
) -> tuple[list[Arm], list[Exclusion]]:
    """The arms the request's rules allow, and an exclusion with the rule for the others."""
    arms = list(arms)
    if accepted.request.provider is None and not _configured(policy):
        return arms, []  # the common case: nothing asks for anything
    rules = rules_of(accepted, policy)
    if not rules.any:
        return arms, []
    kept: list[Arm] = []
    out: list[Exclusion] = []
    for arm in arms:
        rule = breaks(arm.provider, rules)
        if rule is None:
            kept.append(arm)
        else:
            out.append(Exclusion(deployment=arm.deployment, reason=rule))
    return kept, out


def _configured(policy: Policy) -> bool:
    """Whether a route or a tenant of the policy has a data rule (computed once)."""
    key = ("data_rules_configured",)
    found = policy.memo.get(key)
    if found is None:
        config = policy.config
        levels = [*config.routes.values(), *config.tenants.values()]
        found = policy.memo[key] = any(
            level.regions is not None
            or level.zdr
            or level.data_collection == "deny"
            or level.certifications
            for level in levels
        )
    return bool(found)


def refusal(out: Iterable[Exclusion]) -> ErrorBody:
    """The 403 of a request no deployment may serve under its rules."""
    reasons = ", ".join(f"{e.deployment}: {e.reason}" for e in out)
    return ErrorBody(
        type="permission_denied",
        message=f"no deployment may serve this request under its data and price rules ({reasons})",
        code="no_deployment_allowed",
        http_status=403,
    )
