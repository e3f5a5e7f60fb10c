"""Presets: the named sets of routing rules and defaults a request is under.

A request is under its tenant's own preset (``tenants.NAME``: lists, mode, rate), the
named preset its tenant is bound to (``tenants.NAME.preset``), and the named preset it
or its gateway key chose (``preset: NAME``). Each only narrows the others and the
request's own ``provider`` lists: ``only`` lists intersect, ``ignore`` lists add up, the
allowed models intersect, and the data rules add up (app/routing/data_policy.py). The
mode is the request's, else the chosen preset's, else the tenant's, else the route's.

The defaults (a system prompt put first, ``temperature``, ``max_tokens`` where the
request sets none) are applied at ingest, so the accepted request on the routing log is
the one routed, executed and replayed.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.config.schema import Preset, ProviderLists, RoutingConfig
from app.contract import ChatMessage, ChatRequest, RequestAccepted

#: The code of a request naming a preset the policy does not have.
UNKNOWN_PRESET = "unknown_preset"


def named(config: RoutingConfig, request: ChatRequest) -> list[str]:
    """The named presets a request is under: its tenant's, then its own choice."""
    tenant = config.tenants.get(request.tenant) if request.tenant else None
    names = [tenant.preset] if tenant is not None and tenant.preset else []
    if request.preset and request.preset not in names:
        names.append(request.preset)
    return names


def unknown(config: RoutingConfig, request: ChatRequest) -> str | None:
    """The first preset the request is under that the policy does not have."""
    return next((n for n in named(config, request) if n not in config.presets), None)


def applying(config: RoutingConfig, request: ChatRequest) -> list[Preset]:
    return [config.presets[n] for n in named(config, request) if n in config.presets]


def narrow(wider: ProviderLists, narrower: ProviderLists) -> ProviderLists:
    """``narrower``'s lists within ``wider``'s: both ``only`` and both ``models`` hold,
    both ``ignore`` apply, the narrower's ``order`` first."""
    return ProviderLists(
        only=_both(wider.only, narrower.only),
        ignore=[*wider.ignore, *(p for p in narrower.ignore if p not in wider.ignore)],
        order=narrower.order or wider.order,
        models=_both(wider.models, narrower.models),
    )


def _both(wider: list[str] | None, narrower: list[str] | None) -> list[str] | None:
    if narrower is None:
        return wider
    return list(narrower) if wider is None else [x for x in narrower if x in wider]


def lists_of(
    accepted: RequestAccepted, config: RoutingConfig, tenant: ProviderLists
) -> ProviderLists:
    """The lists a request is under: the tenant's, each named preset's, its own."""
    lists = tenant
    for preset in applying(config, accepted.request):
        lists = narrow(lists, preset)
    asked = accepted.request.provider
    if asked is not None:
        own = ProviderLists(only=asked.only, ignore=asked.ignore, order=asked.order)
        lists = narrow(lists, own)
    return lists


def model_allowed(lists: ProviderLists, deployment: str, model: str) -> bool:
    return lists.models is None or deployment in lists.models or model in lists.models


def with_defaults(request: ChatRequest, presets: Sequence[Preset]) -> ChatRequest:
    """The request with the presets' defaults: each system prompt put first (in the
    presets' order), ``temperature`` and ``max_tokens`` where the request sets none. An
    embeddings request takes none of them (it has no messages and writes no answer)."""
    if request.is_embeddings:
        return request
    update: dict[str, object] = {}
    prompts = [p.system_prompt for p in presets if p.system_prompt]
    if prompts:
        first = [ChatMessage(role="system", content=text) for text in prompts]
        update["messages"] = [*first, *request.messages]
    for field in ("temperature", "max_tokens"):
        if getattr(request, field) is None:
            default = next(
                (getattr(p, field) for p in presets if getattr(p, field) is not None), None
            )
            if default is not None:
                update[field] = default
    return request.model_copy(update=update) if update else request


def preset_mode(accepted: RequestAccepted, config: RoutingConfig) -> str | None:
    """The mode of the chosen preset, else of the tenant's named one."""
    return next((p.mode for p in reversed(applying(config, accepted.request)) if p.mode), None)
