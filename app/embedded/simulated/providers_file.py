"""``providers.yaml`` for the router, pointing at the simulated providers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import yaml

from app.embedded.simulated.models import SEED_003_MODELS, SimulatedModel

if TYPE_CHECKING:
    from app.embedded.simulated.server import SimulatedProviders


#: The route of the simulated embeddings models (the chat models' is the caller's).
EMBEDDINGS_ROUTE = "embeddings"


def provider_entry(model: SimulatedModel, base_url: str, time_scale: float = 1.0) -> dict[str, Any]:
    """One providers.yaml entry; baseline and timeout are scaled like the simulated latencies.
    An embeddings model is declared ``kind: embeddings``, its input price its bonus's cost."""
    spec: dict[str, Any] = {"name": model.model}
    priced: dict[str, Any] = {}
    if model.kind == "embeddings":
        spec["kind"] = "embeddings"
        priced["cost_per_mtok"] = model.cost_per_mtok_input
    return {
        "id": model.provider_id,
        "base_url": base_url,
        "cost_per_mtok_input": model.cost_per_mtok_input,
        "cost_per_mtok_output": model.cost_per_mtok_output,
        "max_concurrency": model.max_concurrency,
        "weight_initial": model.weight_initial,
        "p95_latency_baseline_ms": model.p95_latency_baseline_ms * time_scale,
        "timeout_ms": max(1, round(model.timeout_ms * time_scale)),
        **priced,
        "models": [spec],
    }


def providers_config(
    base_urls: Mapping[str, str],
    models: Sequence[SimulatedModel] = SEED_003_MODELS,
    *,
    time_scale: float = 1.0,
    route: str = "chat",
) -> dict[str, Any]:
    """providers.yaml as a dict: one entry per model, one route listing the chat models,
    and route ``embeddings`` the embeddings models when there are some."""
    entries = [provider_entry(m, base_urls[m.provider_id], time_scale) for m in models]
    routes = {route: {"providers": [m.provider_id for m in models if m.kind == "chat"]}}
    embedders = [m.provider_id for m in models if m.kind == "embeddings"]
    if embedders:
        routes[EMBEDDINGS_ROUTE] = {"providers": embedders}
    return {"providers": entries, "routes": routes, "default_route": route}


#: The tenant of the showcase's example budget and dynamic route.
SHOWCASE_TENANT = "demo-team"
#: The showcase's dynamic route: the tenant's requests split between two routing modes.
SHOWCASE_GRAPH = "ab-test"

SHOWCASE_HEADER = """\
# What this file shows (`switchyard demo` prints what each did):
# * model "auto" on route {route}: its auto block picks a model per request, by the
#   request's workload and each model's quality_prior; the decision's auto field says why.
# * prompt caching: the simulated providers report cached tokens for a prefix (a long
#   system prompt, a conversation so far) they answered in the last 5 minutes, billed at
#   cost_per_mtok_cached_input; cache affinity then keeps the conversation on that
#   deployment (the decision's selection_rule: affinity).
# * budgets: tenant {tenant} may spend $1 a day (GET /admin/budgets on the worker).
# * dynamic_routes: tenant {tenant}'s requests walk graph {graph}: by session, 20 % on
#   route {route} in latency mode, 80 % in price mode.
"""


def showcase(
    config: dict[str, Any], models: Sequence[SimulatedModel], *, route: str = "chat"
) -> dict[str, Any]:
    """``config`` with what the embedded stack shows without a file of the user's:

    * ``route``'s ``auto:`` block (``model: "auto"`` picks a model per request) and each
      model's quality prior, the auto router's capability;
    * cached-input prices: the simulated providers report prompt-cache reads for a prefix
      they saw recently (prompt_cache.py), which cache affinity pins a conversation to;
    * a budget: tenant ``demo-team``, $1 a day;
    * a dynamic route bound to ``demo-team``: its requests split by session, 20 % to the
      route in latency mode, 80 % in price mode.
    """
    by_id = {m.provider_id: m for m in models}
    for index, entry in enumerate(config["providers"]):
        model = by_id.get(entry["id"])
        if model is None or model.kind != "chat":
            continue
        cached = {"cost_per_mtok_cached_input": model.cost_per_mtok_cached_input}
        if model.quality_prior is not None:
            entry["models"][0]["quality_prior"] = model.quality_prior
        if model.cost_per_mtok_cached_input is not None:  # beside the other prices
            at = list(entry).index("cost_per_mtok_output") + 1
            items = list(entry.items())
            config["providers"][index] = dict(items[:at] + list(cached.items()) + items[at:])
    config["routes"][route]["auto"] = {"objective": "balanced", "spend_profile": "standard"}
    config["budgets"] = [{"scope": "tenant", "name": SHOWCASE_TENANT, "usd_per_day": 1.0}]
    split = [{"percent": 20, "to": "fast"}, {"percent": 80, "to": "cheap"}]
    config["dynamic_routes"] = {
        SHOWCASE_GRAPH: {
            "bind": [{"tenant": SHOWCASE_TENANT}],
            "start": "split",
            "nodes": {
                "split": {"kind": "split", "branches": split},
                "fast": {"kind": "model", "target": route, "mode": "latency"},
                "cheap": {"kind": "model", "target": route, "mode": "price"},
            },
        }
    }
    return config


def demo_providers_yaml(sim: SimulatedProviders, *, route: str = "chat") -> str:
    """providers.yaml text pointing the router at a started :class:`SimulatedProviders`,
    with the features the embedded stack shows (:func:`showcase`)."""
    config = providers_config(sim.base_urls(), sim.models, time_scale=sim.time_scale, route=route)
    config = showcase(config, sim.models, route=route)
    header = (
        "# Generated by app.embedded.simulated: the reference providers, simulated locally.\n"
        f"# seed={sim.seed} time_scale={sim.time_scale}\n"
    )
    shown = SHOWCASE_HEADER.format(route=route, tenant=SHOWCASE_TENANT, graph=SHOWCASE_GRAPH)
    return header + shown + str(yaml.safe_dump(config, sort_keys=False))
