"""``model: "auto"``: the route's rules pick the model, in the fold.

Candidates are every model of the route's providers (generalist models, and
models specialised in the request's domain) that pass, in order, each exclusion
traced with its reason:

1. the provider lists (tenant preset, request): ``provider_not_in_only``,
   ``provider_ignored`` — they can only narrow;
2. a known price: ``price_unknown`` when the input or the output price is not declared
   (a model whose text price is unknown is not a managed candidate); a
   price declared ``0`` is known, and free (traced as the input ``free``);
3. the model patterns: ``denied_by_pattern``, ``not_in_allowed_patterns``;
4. the spend profile's hard caps: ``over_input_price_cap``, ``over_output_price_cap``;
5. on a retry with fallbacks off, the model first tried only: ``fallbacks_disabled``;
6. the capability floor (:data:`FLOOR_BASE` + :data:`FLOOR_SPAN` x complexity, plus
   the route's margin scaled by ``2 − confidence``): ``below_capability_floor``.
   When no model reaches it the most capable ones stay (``floor_relaxed``).

Capability is the model's ``quality_prior`` (else the route's ``default_quality``,
neutral) as the learning loop has revised it in the request's context buckets
(:func:`app.routing.estimates.quality`). The survivors are ranked by the route's
objective: a weighted sum of quality (capability), reliability (1 − the failure
EWMA), latency (``1 / (1 + log2(latency / fastest))``) and price (the same on the
request's estimated cost). Ties keep config order. The selection then takes the
first ranked deployment that breakers, Retry-After and concurrency allow, and
retries go down the ranking. Everything the request could say about objective,
caps or patterns is ignored: only the route's config counts.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from fnmatch import fnmatchcase

from app.config.auto import AUTO_MODEL, AutoConfig
from app.config.providers import ProviderConfig, deployment_id
from app.contract import AutoTrace, Candidate, ErrorBody, Exclusion, RequestAccepted
from app.contract.mode import RoutingMode
from app.routing import context, estimates
from app.routing.auto_classify import Classification, classify
from app.routing.candidates import LIST_RULES, CandidatePlan, not_allowed, provider_lists
from app.routing.policy import Arm, Policy
from app.routing.presets import model_allowed
from app.routing.select import Selection
from app.routing.state import RouteState
from app.understanding.modes import ModeChoice

ALGORITHM_VERSION = "auto-router/1"
FLOOR_BASE, FLOOR_SPAN = 0.5, 0.45
FACTORS = ("quality", "reliability", "latency", "price")
#: Weights of quality, reliability, latency and price per objective.
OBJECTIVE_WEIGHTS: dict[str, tuple[float, float, float, float]] = {
    "balanced": (0.4, 0.2, 0.2, 0.2),
    "quality": (0.7, 0.2, 0.05, 0.05),
    "price": (0.15, 0.15, 0.1, 0.6),
    "latency": (0.15, 0.15, 0.6, 0.1),
}
#: Characters per input token, to price the request before it is made.
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class _Scored:
    arm: Arm
    index: int
    inputs: dict[str, float]
    factors: dict[str, float]
    score: float


def config_for(accepted: RequestAccepted, policy: Policy) -> AutoConfig | None:
    """The route's auto settings when the request asked for ``auto`` and no fixed model
    (a dynamic route's pin) replaced it."""
    if accepted.request.model != AUTO_MODEL or accepted.pinned:
        return None
    route = policy.config.routes.get(accepted.route)
    return None if route is None else route.auto


def plan(
    state: RouteState, accepted: RequestAccepted, policy: Policy, tried: Collection[str]
) -> CandidatePlan | None:
    """The auto router's ranked plan, or None when the request is not an auto request."""
    config = config_for(accepted, policy)
    if config is None:
        return None
    features = accepted.features
    domain = features.domain.domain if features is not None and features.domain else None
    mode = ModeChoice(RoutingMode(config.objective), "route_default")
    kept, excluded = _eligible(accepted, policy, config, domain, tried)
    if not kept:
        reasons = ", ".join(f"{e.deployment}: {e.reason}" for e in excluded) or "none"
        message = f"no model of route {accepted.route!r} meets its auto rules ({reasons})"
        error = ErrorBody(
            type="invalid_request", message=message, code="no_candidate", http_status=400
        )
        if excluded and all(e.reason in LIST_RULES for e in excluded):
            error = not_allowed(message)  # the provider lists alone left nothing
        return CandidatePlan([], excluded, "auto", domain, mode, refusal=error)
    found = classify(accepted)
    chain = _chain(accepted, policy)
    capability = {arm.deployment: _capability(state, arm, chain, config, policy) for arm in kept}
    floor = _floor(found, config)
    able = [arm for arm in kept if capability[arm.deployment] >= floor]
    relaxed = not able
    if relaxed:
        best = max(capability.values())
        able = [arm for arm in kept if capability[arm.deployment] == best]
    excluded += [
        Exclusion(deployment=arm.deployment, reason="below_capability_floor")
        for arm in kept
        if arm not in able
    ]
    ranked = _rank(state, accepted, able, capability, config)
    caps = config.caps
    trace = AutoTrace(
        algorithm_version=ALGORITHM_VERSION,
        classifier=found.source,
        breakdown=found.breakdown,
        workload=found.workload,
        complexity=found.complexity,
        confidence=found.confidence,
        objective=config.objective,
        spend_profile=config.spend_profile,
        max_input_usd_per_mtok=caps[0],
        max_output_usd_per_mtok=caps[1],
        capability_floor=round(floor, 4),
        floor_relaxed=relaxed,
        inputs={s.arm.deployment: s.inputs for s in ranked},
    )
    scores = [
        Candidate(deployment=s.arm.deployment, score=s.score, factors=s.factors) for s in ranked
    ]
    return CandidatePlan(
        [s.arm for s in ranked],
        excluded,
        "auto",
        domain,
        mode,
        ordered=True,
        scores=scores,
        auto=trace,
    )


def trace(accepted: RequestAccepted, plan: CandidatePlan, selection: Selection) -> AutoTrace | None:
    """The decision's auto trace: the plan's, with the choice and the fallback order; or
    the substitution when a fixed model replaced ``auto``."""
    if plan.auto is None:
        if accepted.request.model == AUTO_MODEL and accepted.pinned and accepted.dynamic:
            return AutoTrace(
                algorithm_version=ALGORITHM_VERSION,
                chosen=accepted.pinned,
                model=accepted.pinned.partition(":")[2],
                substituted_by=f"dynamic_route:{accepted.dynamic.graph}",
            )
        return None
    chosen = selection.chosen
    if chosen is None:
        return plan.auto
    out = {e.deployment for e in selection.excluded}
    fallbacks = [
        a.deployment
        for a in plan.arms
        if a.deployment != chosen.deployment and a.deployment not in out
    ]
    return plan.auto.model_copy(
        update={"chosen": chosen.deployment, "model": chosen.model, "fallbacks": fallbacks}
    )


# --------------------------------------------------------------------------- eligibility


def _eligible(
    accepted: RequestAccepted,
    policy: Policy,
    config: AutoConfig,
    domain: str | None,
    tried: Collection[str],
) -> tuple[list[Arm], list[Exclusion]]:
    lists = provider_lists(accepted, policy)
    first_model = next(iter(tried), "").partition(":")[2] if not config.fallbacks else ""
    kept: list[Arm] = []
    excluded: list[Exclusion] = []
    for provider in policy.config.route_providers(accepted.route):
        for spec in provider.models:
            if spec.specialized is not None and spec.specialized != domain:
                continue
            reason = _static_reason(provider, spec.name, lists.only, lists.ignore, config)
            deployment = deployment_id(provider.id, spec.name)
            if reason is None and not model_allowed(lists, deployment, spec.name):
                reason = "model_not_allowed"
            if reason is None and first_model and spec.name != first_model:
                reason = "fallbacks_disabled"
            arm = Arm(deployment_id(provider.id, spec.name), provider, spec.name)
            if reason is None:
                kept.append(arm)
            else:
                excluded.append(Exclusion(deployment=arm.deployment, reason=reason))
    return kept, excluded


def _static_reason(
    provider: ProviderConfig,
    model: str,
    only: list[str] | None,
    ignore: list[str],
    config: AutoConfig,
) -> str | None:
    if only is not None and provider.id not in only:
        return "provider_not_in_only"
    if provider.id in ignore:
        return "provider_ignored"
    if not provider.price_known:
        return "price_unknown"
    price_in, price_out = provider.input_price, provider.output_price
    names = (f"{provider.id}:{model}", f"{provider.id}/{model}", model)
    if any(fnmatchcase(name, pattern) for pattern in config.deny for name in names):
        return "denied_by_pattern"
    if config.allow and not any(
        fnmatchcase(name, pattern) for pattern in config.allow for name in names
    ):
        return "not_in_allowed_patterns"
    cap_in, cap_out = config.caps
    if cap_in is not None and price_in > cap_in:
        return "over_input_price_cap"
    if cap_out is not None and price_out > cap_out:
        return "over_output_price_cap"
    return None


# --------------------------------------------------------------------------- scoring


def _chain(accepted: RequestAccepted, policy: Policy) -> tuple[str, ...]:
    if not policy.params.context_learning:
        return (context.EVERYTHING,)
    return context.levels(context.context_key(accepted))


def _capability(
    state: RouteState, arm: Arm, chain: tuple[str, ...], config: AutoConfig, policy: Policy
) -> float:
    """The model's quality prior, as grades in the request's buckets revised it."""
    prior = arm.provider.quality_prior_of(arm.model)
    prior = config.default_quality if prior is None else prior
    arm_state = state.arm(arm.deployment)
    if not arm_state.evidence:
        return prior
    return estimates.quality(arm_state, chain, prior, 1.0, policy.params).mean


def _floor(found: Classification, config: AutoConfig) -> float:
    margin = config.capability_margin * (2.0 - found.confidence)
    return FLOOR_BASE + FLOOR_SPAN * found.complexity + margin


def _rank(
    state: RouteState,
    accepted: RequestAccepted,
    arms: list[Arm],
    capability: dict[str, float],
    config: AutoConfig,
) -> list[_Scored]:
    tokens_in = max(1, accepted.prompt_chars // CHARS_PER_TOKEN)
    tokens_out = accepted.request.max_tokens or estimates.token_means(state.arms.values())[1]
    inputs = {}
    for arm in arms:
        arm_state = state.arm(arm.deployment)
        latency_s = (
            arm_state.avg_latency_s
            if arm_state.latency_samples
            else arm.provider.p95_latency_baseline_ms / 1000.0
        )
        inputs[arm.deployment] = {
            "capability": capability[arm.deployment],
            "reliability": 1.0 - arm_state.ewma_failure,
            "latency_s": latency_s,
            "cost_usd": estimates.priced(arm, (float(tokens_in), float(tokens_out))),
            # Declared free (price 0), as against a price merely absent (never ranked).
            "free": 1.0 if arm.provider.free else 0.0,
        }
    fastest = min(i["latency_s"] for i in inputs.values())
    cheapest = min(i["cost_usd"] for i in inputs.values())
    weights = OBJECTIVE_WEIGHTS[config.objective]
    scored = []
    for index, arm in enumerate(arms):
        given = inputs[arm.deployment]
        values = (
            given["capability"],
            given["reliability"],
            _relative(given["latency_s"], fastest),
            _relative(given["cost_usd"], cheapest),
        )
        factors = {
            name: round(w * v, 6) for name, w, v in zip(FACTORS, weights, values, strict=True)
        }
        score = round(sum(factors.values()), 6)
        scored.append(_Scored(arm, index, given, factors, score))
    return sorted(scored, key=lambda s: (-s.score, s.index))


def _relative(value: float, best: float) -> float:
    """1 for the best (smallest) value, 1/2 at twice it, 1/3 at four times ..."""
    tiny = 1e-12
    return 1.0 / (1.0 + math.log2(max(value, tiny) / max(best, tiny)))
