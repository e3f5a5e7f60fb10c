"""Who may be ranked for a request, and by which weights (docs/design.md#routing).

Before any live state is looked at, a request's candidates are narrowed by, in
order: a pinned ``provider:model`` (no fallback), the tenant preset's and the
request's provider lists (``only``, ``ignore``), and domain routing (the
domain's specialists with their specialised model, or the generalists). The
survivors are ordered (``order`` first, then config order) and every deployment
left out is traced with the rule that left it out. The routing mode follows
its precedence: suffix > request > preset > route default.

Pure: the request as accepted (its features were computed at ingest) and the
policy in, a :class:`CandidatePlan` out.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import dataclass, replace
from typing import cast

from app.config.providers import ProviderConfig, deployment_id
from app.config.schema import ProviderLists, TenantPolicy
from app.contract import AutoTrace, Candidate, ErrorBody, Exclusion, RequestAccepted
from app.routing import breaker
from app.routing.capabilities import needs_of, unable
from app.routing.data_policy import breaks, rules_of
from app.routing.policy import Arm, Policy
from app.routing.presets import (
    UNKNOWN_PRESET,
    lists_of,
    model_allowed,
    preset_mode,
    unknown,
)
from app.routing.records import record
from app.routing.state import BreakerPhase, RouteState
from app.understanding.domains import DomainCandidates, domain_candidates, is_generalist
from app.understanding.modes import SUFFIX_MODES, ModeChoice, effective_mode, parse_mode

NO_TENANT_POLICY = TenantPolicy()
#: The rules of the provider lists, and the code of a request they leave nothing.
LIST_RULES = frozenset({"provider_not_in_only", "provider_ignored", "model_not_allowed"})
NOT_ALLOWED = "deployment_not_allowed"
#: A route that has seen nothing yet (every deployment closed and idle).
NO_STATE = RouteState()


@record
class CandidatePlan:
    arms: list[Arm]
    excluded: list[Exclusion]
    #: ``pinned``, or the domain rule (``specialists``, ``fallback_generalists`` ...).
    rule: str
    domain: str | None
    mode: ModeChoice
    #: A pinned deployment disables fallback.
    no_fallback: bool = False
    #: Set when the request cannot be routed at all (unknown pin, empty lists).
    refusal: ErrorBody | None = None
    #: A local-first attempt: the answer is kept only at this confidence or above.
    min_confidence: float | None = None
    #: ``arms`` are ranked (the auto router's order): the first eligible one is
    #: chosen, ``scores`` are the ranking's trace and ``auto`` the rest of it.
    ordered: bool = False
    #: The selection rule of an ordered plan's choice (``auto``, ``sort_price`` ...).
    order_rule: str = "auto"
    scores: list[Candidate] | None = None
    auto: AutoTrace | None = None


def tenant_policy(accepted: RequestAccepted, policy: Policy) -> TenantPolicy:
    tenant = accepted.request.tenant
    return policy.config.tenants.get(tenant, NO_TENANT_POLICY) if tenant else NO_TENANT_POLICY


def _mode(accepted: RequestAccepted, preset: TenantPolicy, policy: Policy) -> ModeChoice:
    route = policy.config.routes.get(accepted.route)
    request_mode = accepted.request.routing.mode if accepted.request.routing else None
    named_mode = preset_mode(accepted, policy.config) or preset.mode
    return effective_mode(
        SUFFIX_MODES[accepted.suffix] if accepted.suffix else None,
        parse_mode(request_mode) if request_mode else None,
        parse_mode(named_mode) if named_mode else None,
        parse_mode(route.mode) if route is not None and route.mode else None,
    )


def provider_lists(accepted: RequestAccepted, policy: Policy) -> ProviderLists:
    """The tenant preset's provider lists narrowed by the request's."""
    return _merged_lists(tenant_policy(accepted, policy), accepted, policy)


def _merged_lists(
    preset: ProviderLists, accepted: RequestAccepted, policy: Policy
) -> ProviderLists:
    """The tenant's lists narrowed by its named presets' and the request's own."""
    return lists_of(accepted, policy.config, preset)


def not_allowed(message: str) -> ErrorBody:
    """The 403 of a request the provider lists (the tenant's preset, the request's own)
    leave no deployment: a pin they leave out, a route or a model none of whose
    deployments they allow (a dynamic route's fallback model is tried next)."""
    return ErrorBody(type="invalid_request", message=message, code=NOT_ALLOWED, http_status=403)


def _refused(message: str, code: str, mode: ModeChoice) -> CandidatePlan:
    error = ErrorBody(type="invalid_request", message=message, code=code, http_status=400)
    return CandidatePlan([], [], "refused", None, mode, refusal=error)


def _pinned(
    accepted: RequestAccepted,
    providers: list[ProviderConfig],
    mode: ModeChoice,
    lists: ProviderLists,
) -> CandidatePlan:
    """The pinned deployment alone; a pin cannot widen the tenant's or the request's
    provider lists (``only``, ``ignore``): a pin they leave out is refused."""
    provider_id, _, model = (accepted.pinned or "").partition(":")
    left_out = None
    if lists.only is not None and provider_id not in lists.only:
        left_out = "provider_not_in_only"
    elif provider_id in lists.ignore:
        left_out = "provider_ignored"
    elif not model_allowed(lists, accepted.pinned or "", model):
        left_out = "model_not_allowed"
    if left_out is not None:
        error = not_allowed(
            f"model {accepted.pinned!r} is not allowed for this request ({left_out})"
        )
        excluded = [Exclusion(deployment=accepted.pinned or "", reason=left_out)]
        return CandidatePlan([], excluded, "pinned", None, mode, refusal=error)
    for provider in providers:
        if provider.id == provider_id and model in {m.name for m in provider.models}:
            excluded = [
                Exclusion(deployment=deployment_id(p.id, p.default_model), reason="not_pinned")
                for p in providers
                if p.id != provider_id
            ]
            arm = Arm(deployment_id(provider_id, model), provider, model)
            return CandidatePlan([arm], excluded, "pinned", None, mode, no_fallback=True)
    return _refused(
        f"model {accepted.pinned!r} names no configured deployment of route {accepted.route!r}",
        "unknown_deployment",
        mode,
    )


def local_arm(accepted: RequestAccepted, policy: Policy) -> Arm | None:
    """The route's local-first deployment, if it has one."""
    route = policy.config.routes.get(accepted.route)
    if route is None or route.local_first is None:
        return None
    local = policy.config.provider_by_id[route.local_first.provider]
    return Arm(deployment_id(local.id, local.default_model), local, local.default_model)


def local_unready(
    arm: Arm, accepted: RequestAccepted, lists: ProviderLists, state: RouteState, policy: Policy
) -> str | None:
    """Why the local deployment cannot take the request now (None: it can): the
    request's lists leave it out, the model cannot serve it (its modalities, its
    context window), its breaker is open (or half-open with its probe out), it is busy or
    cooling down. Never waited for: the cloud takes the request at once."""
    if lists.only is not None and arm.provider.id not in lists.only:
        return "provider_not_in_only"
    if arm.provider.id in lists.ignore:
        return "provider_ignored"
    if not model_allowed(lists, arm.deployment, arm.model):
        return "model_not_allowed"
    lacks = unable(arm, accepted, policy) or breaks(arm.provider, rules_of(accepted, policy))
    if lacks is not None:
        return f"local_{lacks}"
    arm_state = state.arm(arm.deployment)
    if arm_state.refused_tokens and needs_of(accepted).tokens >= arm_state.refused_tokens:
        return "local_context_window_learnt"
    # Its breaker as selection will see it at this clock: once open long enough it is
    # half-open, and the local model takes the probe that can close it again (else it
    # would be skipped for good: only selection moves a breaker on time).
    phase = breaker.on_clock(arm_state.breaker, state.clock, policy.breaker).state
    if phase is BreakerPhase.OPEN:
        return "local_breaker_open"
    if phase is BreakerPhase.HALF_OPEN and arm_state.in_flight > 0:
        return "local_half_open_probe_in_flight"
    if arm_state.in_flight >= arm.provider.max_concurrency:
        return "local_busy"
    if arm_state.retry_after_until > state.clock:
        return "local_retry_after"
    return None


def _local_first(
    accepted: RequestAccepted, policy: Policy, mode: ModeChoice, arm: Arm
) -> CandidatePlan:
    route = policy.config.routes[accepted.route]
    assert route.local_first is not None
    others = [
        Exclusion(deployment=deployment_id(p.id, p.default_model), reason="local_first")
        for p in policy.config.route_providers(accepted.route)
        if p.id != arm.provider.id
    ]
    return CandidatePlan(
        [arm], others, "local_first", None, mode, min_confidence=route.local_first.threshold
    )


@dataclass(frozen=True, slots=True)
class _Narrowed:
    """Domain routing's result for one set of providers, with its arms and exclusions
    built (the policy never changes: computed once per providers and domain)."""

    found: DomainCandidates
    arms: tuple[Arm, ...]
    excluded: tuple[Exclusion, ...]


def _narrowed(
    policy: Policy, kept: list[ProviderConfig], domain: str | None, whole: str | None
) -> _Narrowed:
    """``whole``: the route's name when ``kept`` is all of its providers (a cheaper key)."""
    key: Hashable = ("narrowed", whole, domain)
    if whole is None:
        key = ("narrowed", tuple(p.id for p in kept), domain)
    found = policy.memo.get(key)
    if found is None:
        narrowed = domain_candidates(kept, domain)
        found = policy.memo[key] = _Narrowed(
            narrowed,
            tuple(Arm(deployment_id(p.id, model), p, model) for p, model in narrowed.chosen),
            tuple(Exclusion(deployment=d, reason=r) for d, r in narrowed.excluded),
        )
    return cast(_Narrowed, found)


def _route_providers(policy: Policy, route: str) -> list[ProviderConfig]:
    """The route's providers in config order (none for a route no longer configured).
    Shared: never changed by the caller."""
    key = ("route_providers", route)
    found = policy.memo.get(key)
    if found is None:
        config = policy.config
        found = policy.memo[key] = (
            config.route_providers(route) if route in config.route_names() else []
        )
    return cast(list[ProviderConfig], found)


def plan_candidates(
    accepted: RequestAccepted,
    policy: Policy,
    attempt: int = 1,
    tried: Collection[str] = (),
    state: RouteState = NO_STATE,
) -> CandidatePlan:
    """The candidates of an attempt. On a local-first route the local deployment alone
    takes attempt 1 when it can now (``state``: the route's); otherwise, and for every
    later attempt, the cloud deployments do, without it (it answers only under its
    confidence gate)."""
    providers = _route_providers(policy, accepted.route)
    preset = tenant_policy(accepted, policy)
    mode = _mode(accepted, preset, policy)
    if accepted.model_error:
        return _refused(f"invalid model id: {accepted.model_error}", "invalid_model", mode)
    missing = unknown(policy.config, accepted.request)
    if missing is not None:
        return _refused(f"preset {missing!r} is not configured", UNKNOWN_PRESET, mode)
    lists = _merged_lists(preset, accepted, policy)
    if accepted.pinned:
        return _pinned(accepted, providers, mode, lists)
    excluded: list[Exclusion] = []
    local = local_arm(accepted, policy)
    if local is not None:
        unready: str | None
        if attempt > 1:  # asked first only, under its confidence gate
            unready = "already_tried" if local.deployment in tried else "local_first_only"
        else:
            unready = local_unready(local, accepted, lists, state, policy)
        if unready is None:
            return _local_first(accepted, policy, mode, local)
        excluded.append(Exclusion(deployment=local.deployment, reason=unready))
        providers = [p for p in providers if p.id != local.provider.id]
    kept: list[ProviderConfig] = []
    whole: str | None = None
    if lists.only is None and not lists.ignore and local is None:
        kept, whole = providers, accepted.route
    for provider in providers if whole is None else ():
        reason = None
        if lists.only is not None and provider.id not in lists.only:
            reason = "provider_not_in_only"
        elif provider.id in lists.ignore:
            reason = "provider_ignored"
        if reason is None:
            kept.append(provider)
        else:
            excluded.append(
                Exclusion(
                    deployment=deployment_id(provider.id, provider.default_model), reason=reason
                )
            )
    features = accepted.features
    domain = features.domain.domain if features is not None and features.domain else None
    if accepted.request.is_embeddings:  # domain specialists are chat models
        domain = None
    memo = _narrowed(policy, kept, domain, whole)
    narrowed, arms = memo.found, list(memo.arms)
    if narrowed.rule == "specialists" and all(
        deployment_id(p.id, model) in tried for p, model in narrowed.chosen
    ):
        # Every specialist has failed this request: the generalists beat no answer.
        narrowed = domain_candidates([p for p in kept if is_generalist(p)] or kept, None)
        narrowed = replace(narrowed, domain=domain, rule="fallback_generalists")
        excluded += [Exclusion(deployment=d, reason=r) for d, r in narrowed.excluded]
        arms = [Arm(deployment_id(p.id, model), p, model) for p, model in narrowed.chosen]
    else:
        excluded += memo.excluded
    if lists.models is not None:
        excluded += [
            Exclusion(deployment=a.deployment, reason="model_not_allowed")
            for a in arms
            if not model_allowed(lists, a.deployment, a.model)
        ]
        arms = [a for a in arms if model_allowed(lists, a.deployment, a.model)]
    if lists.order:
        rank = {provider_id: i for i, provider_id in enumerate(lists.order)}
        arms.sort(key=lambda arm: rank.get(arm.provider.id, len(rank)))
    if not arms:
        rules = ", ".join(f"{e.deployment}: {e.reason}" for e in excluded) or "route has none"
        message = f"the request's constraints leave no provider ({rules})"
        if any(e.reason in LIST_RULES for e in excluded):  # the lists left no cloud one
            return CandidatePlan([], excluded, "refused", None, mode, refusal=not_allowed(message))
        return _refused(message, "no_candidate", mode)
    sort = accepted.request.provider.sort if accepted.request.provider else None
    if sort is not None:  # tried in that order, the first that can take it now
        arms.sort(key=lambda arm: _sort_key(sort, arm, state))
        return CandidatePlan(
            arms, excluded, narrowed.rule, domain, mode, ordered=True, order_rule=f"sort_{sort}"
        )
    return CandidatePlan(arms, excluded, narrowed.rule, domain, mode)


def _sort_key(sort: str, arm: Arm, state: RouteState) -> float:
    """Cheapest (configured input + output price), fastest (latency EMA; untried last)
    or highest observed output tokens/s first; ties keep the config order."""
    if sort == "price":
        return arm.provider.input_price + arm.provider.output_price
    arm_state = state.arm(arm.deployment)
    if sort == "latency":
        return arm_state.avg_latency_s if arm_state.latency_samples else float("inf")
    return -arm_state.tokens_per_s
