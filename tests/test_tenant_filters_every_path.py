"""A tenant's preset (its provider lists and data rules) holds on every routing path.

One config, three restricted tenants (``only``, ``ignore``, data rules) and every way a
request reaches a deployment: a route alias, a suffix, a mode, provider sort, a pin (its
model id suffixed or not), ``model: auto``, a request that tries to widen the preset or
narrows it to nothing, local-first, a dynamic route (its model node, a pinned model node,
a node with its own provider lists, a split, its fallback models on other routes, bound
to the tenant or to the API key), the retries of a request whose preset narrowed while
its first attempt was out, a session or a context pinned to a deployment the tenant may
not use. Each request is folded by the real fold, every attempt fails (a 5xx, a
timeout, a 429, in turn) until the request ends, and no dispatch may name a deployment
the tenant may not use; a request refused before any call is refused with a code that
names the rule (``deployment_not_allowed``: the provider lists; ``no_deployment_allowed``:
the data rules), and every decision traces the deployments of its route the tenant may
not use, with their rule. A dynamic route's model none of whose deployments the tenant
may use passes the request to its next fallback model, whichever rule forbids it.

API keys (``gateway_keys``) carry a tenant (its preset is what is tested here: the
gateway sets the request's tenant from its key), a name a dynamic route may be bound to
(``api_key`` paths below) and the routes the key may name (checked by the gateway on the
route ``model`` names; the router's policy does not hold the keys).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import pytest
from auto_factories import CacheLog
from factories import T0, params

from app.config.schema import RoutingConfig, parse_config
from app.contract import Decision, RequestAccepted, Response, StatusClass
from app.routing.answers import at
from app.routing.driver import Driver
from app.routing.policy import Policy
from bench.ingested import ingest

SYSTEM = "You are the support assistant of Example Corp."


def _provider(
    pid: str, model: str, region: str, retention: Any, price: float, *more: str
) -> dict[str, Any]:
    return {
        "id": pid,
        "base_url": f"https://{pid}.example.test/v1",
        "api_key": "k",
        "region": region,
        "data_retention": retention,
        "trains_on_data": False,
        "cost_per_mtok_input": price,
        "cost_per_mtok_output": price * 4,
        "models": [{"name": name, "quality_prior": 0.8} for name in (model, *more)],
    }


PROVIDERS = [
    _provider("openai-x", "gpt", "us", 30, 2.5),
    _provider("anthropic-x", "claude", "us", "none", 3.0),
    _provider("groq-x", "llama", "us", 7, 0.3, "llama:free"),
    _provider("deepseek-x", "chat", "cn", 30, 0.5),
    _provider("mistral-eu", "large", "eu", "none", 1.0),
    _provider("local-smol", "smollm2", "onprem", "none", 0.0),
]
DEPLOYMENT = {p["id"]: f"{p['id']}:{p['models'][0]['name']}" for p in PROVIDERS}

#: The presets under test, and the providers each leaves the tenant (worked out by hand
#: from the providers' regions and retention: the test does not ask the router).
PRESETS: dict[str, dict[str, Any]] = {
    "narrow": {"only": ["anthropic-x", "mistral-eu"]},
    "picky": {"ignore": ["openai-x", "groq-x", "local-smol"]},
    "eu": {"regions": ["eu"], "zdr": True},
}
ALLOWED: dict[str, set[str]] = {
    "narrow": {"anthropic-x", "mistral-eu"},
    "picky": {"anthropic-x", "mistral-eu", "deepseek-x"},
    "eu": {"mistral-eu"},
}
#: Why a deployment is left out for the tenant (the local model's carry ``local_``).
RULES = {
    "provider_not_in_only",
    "provider_ignored",
    "region_not_allowed",
    "retains_data",
    "local_region_not_allowed",
    "local_retains_data",
}
#: The answers that say the tenant's rules leave nothing: its provider lists, its data rules.
RULE_ANSWERS = {("deployment_not_allowed", 403), ("no_deployment_allowed", 403)}

GRAPH: dict[str, Any] = {
    # Bound to each restricted tenant's twin (``<tenant>-g``, the same preset) and to
    # an API key.
    "bind": [{"tenant": f"{t}-g"} for t in PRESETS] + [{"api_key": "graph-key"}],
    "start": "is_split",
    "nodes": {
        "is_split": {
            "kind": "condition",
            "when": {"metadata": {"path": ["split"]}},
            "true": "split",
            "false": "is_pin",
        },
        "is_pin": {
            "kind": "condition",
            "when": {"metadata": {"path": ["pin"]}},
            "true": "pin",
            "false": "is_widen",
        },
        "is_widen": {
            "kind": "condition",
            "when": {"metadata": {"path": ["widen"]}},
            "true": "widen",
            "false": "is_us",
        },
        "is_us": {
            "kind": "condition",
            "when": {"metadata": {"path": ["us"]}},
            "true": "us",
            "false": "main",
        },
        "split": {
            "kind": "split",
            "branches": [{"percent": 50, "to": "main"}, {"percent": 50, "to": "cheap"}],
        },
        # A route with forbidden deployments (all of them, for ``eu``), then a route with
        # forbidden and allowed ones, then a pin the data rules forbid.
        "main": {
            "kind": "model",
            "target": "premium",
            "fallback_models": ["cheap", "anthropic-x:claude"],
        },
        "cheap": {"kind": "model", "target": "cheap", "fallback_models": ["premium"]},
        # A pin every restricted tenant is denied, then a route with an allowed one.
        "pin": {"kind": "model", "target": "openai-x:gpt", "fallback_models": ["cheap"]},
        # A route none of whose deployments any restricted tenant may use.
        "us": {"kind": "model", "target": "us", "fallback_models": ["cheap"]},
        # The node's own lists name forbidden providers: they replace the request's, not
        # the tenant's.
        "widen": {
            "kind": "model",
            "target": "chat",
            "provider": {"only": ["openai-x", "groq-x", "mistral-eu", "anthropic-x"]},
            "fallback_models": ["us"],
        },
    },
}


def config(presets: bool = True) -> RoutingConfig:
    """The test config; without ``presets`` every tenant is unrestricted (a config
    before its presets were narrowed)."""
    tenants = {t: p for t, p in PRESETS.items()} if presets else {}
    tenants |= {f"{t}-g": p for t, p in tenants.items()}
    return parse_config(
        {
            "providers": PROVIDERS,
            "routes": {
                "chat": {
                    "providers": ["openai-x", "anthropic-x", "groq-x", "mistral-eu"],
                    "auto": {"spend_profile": "unrestricted"},
                },
                "premium": {"providers": ["openai-x", "anthropic-x"]},
                "cheap": {"providers": ["groq-x", "deepseek-x", "mistral-eu"]},
                "local": {
                    "providers": ["local-smol", "openai-x", "mistral-eu"],
                    "local_first": {"provider": "local-smol"},
                },
                "us": {"providers": ["openai-x", "groq-x"]},
            },
            "tenants": tenants,
            "dynamic_routes": {"g": GRAPH},
            "gateway_keys": [{"sha256": "0" * 64, "tenant": "narrow", "name": "graph-key"}],
        },
        {},
    )


def policy(presets: bool = True) -> Policy:
    return Policy(config(presets), params(cb_failure_threshold=3, max_attempts=3))


POLICY = policy()
_offsets = count()


def request(
    n: int,
    *,
    tenant: str | None,
    model: str | None = "chat",
    user: str = "hello",
    session: str | None = None,
    **fields: Any,
) -> RequestAccepted:
    """Request ``r<n>`` as ingest accepts it (its pin, suffix and prefix parsed)."""
    body: dict[str, Any] = {
        "request_id": f"r{n}",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
        "tenant": tenant,
        **fields,
    }
    if model is not None:
        body["model"] = model
    if session is not None:
        body["session_id"] = session
    accepted = ingest(body, next(_offsets), at(T0 + n), POLICY.config)
    assert isinstance(accepted, RequestAccepted), accepted
    return accepted


FAILURES = (StatusClass.SERVER_ERROR, StatusClass.TIMEOUT, StatusClass.RATE_LIMITED)


def failing(decision: Decision) -> StatusClass:
    """Every attempt fails: a 5xx, a timeout, a 429, in turn."""
    return FAILURES[decision.attempt % len(FAILURES)]


def succeeding(_: Decision) -> StatusClass:
    return StatusClass.SUCCESS


@dataclass
class Run:
    """The decisions and responses of the requests under test (not of a warm-up)."""

    sent: set[str]
    decisions: list[Decision] = field(default_factory=list)
    responses: list[Response] = field(default_factory=list)
    #: The providers the request's own lists allow (None: it has none): they narrow its
    #: tenant's.
    narrowed_to: set[str] | None = None
    #: The deployment a warm-up pinned the tested requests' session or context to.
    pinned_to: str | None = None


Path = Callable[[str], Run]
#: Enough idle seconds for every parked attempt to reach its deadline.
MAX_TICKS = 300


def _log(pol: Policy, status: Callable[[Decision], StatusClass]) -> CacheLog:
    return CacheLog(pol, status=status, cached=lambda _: 1500, max_ticks=MAX_TICKS)


def _run(events: list[RequestAccepted], narrowed_to: set[str] | None = None) -> Run:
    log = _log(POLICY, failing)
    log.run(list(events))
    sent = {e.request.request_id for e in events}
    return Run(sent, log.decisions, log.responses, narrowed_to)


def alias(tenant: str) -> Run:
    return _run([request(1, tenant=tenant)])


def suffix(tenant: str) -> Run:
    return _run(
        [
            request(1, tenant=tenant, model="chat:nitro"),
            request(2, tenant=tenant, model="chat:floor"),
        ]
    )


def mode(tenant: str) -> Run:
    return _run([request(1, tenant=tenant, routing={"mode": "latency"})])


def sort(tenant: str) -> Run:
    return _run([request(1, tenant=tenant, provider={"sort": "price"})])


def widening_request(tenant: str) -> Run:
    """The request's own ``only`` names forbidden providers: it can only narrow."""
    only = ["openai-x", "groq-x", "mistral-eu", "deepseek-x"]
    return _run([request(1, tenant=tenant, provider={"only": only})], narrowed_to=set(only))


def narrowing_request(tenant: str) -> Run:
    event = request(1, tenant=tenant, provider={"ignore": ["mistral-eu"]})
    allowed = {p["id"] for p in PROVIDERS} - {"mistral-eu"}
    return _run([event], narrowed_to=allowed)


def nothing_left_by_request(tenant: str) -> Run:
    """The request's ``only`` and the tenant's preset leave no deployment of the route."""
    only = ["openai-x", "groq-x"]
    return _run([request(1, tenant=tenant, provider={"only": only})], narrowed_to=set(only))


def auto_nothing_left(tenant: str) -> Run:
    only = ["openai-x", "groq-x"]
    event = request(1, tenant=tenant, model="auto", provider={"only": only})
    return _run([event], narrowed_to=set(only))


def pin_allowed(tenant: str) -> Run:
    return _run([request(1, tenant=tenant, model="mistral-eu:large")])


def pin_forbidden(tenant: str) -> Run:
    return _run([request(1, tenant=tenant, model="openai-x:gpt")])


def pin_forbidden_suffixed(tenant: str) -> Run:
    """A pin whose canonical model id carries a suffix: still a pin of its provider."""
    return _run([request(1, tenant=tenant, model="groq-x:llama:free")])


def auto(tenant: str) -> Run:
    return _run([request(1, tenant=tenant, model="auto")])


def local_first(tenant: str) -> Run:
    return _run([request(1, tenant=tenant, model="local")])


def nothing_allowed(tenant: str) -> Run:
    return _run([request(1, tenant=tenant, model="us")])


def dynamic_main(tenant: str) -> Run:
    return _run([request(1, tenant=f"{tenant}-g")])


def dynamic_auto(tenant: str) -> Run:
    return _run([request(1, tenant=f"{tenant}-g", model="auto")])


def dynamic_split(tenant: str) -> Run:
    events = [
        request(n, tenant=f"{tenant}-g", session=f"s{n}", metadata={"path": "split"})
        for n in range(1, 7)
    ]
    run = _run(events)
    assert {d.dynamic.path["end"] for d in run.decisions if d.dynamic} >= {"main", "cheap"}
    return run


def dynamic_pin(tenant: str) -> Run:
    return _run([request(1, tenant=f"{tenant}-g", metadata={"path": "pin"})])


def dynamic_forbidden_route(tenant: str) -> Run:
    return _run([request(1, tenant=f"{tenant}-g", metadata={"path": "us"})])


def dynamic_widen(tenant: str) -> Run:
    return _run([request(1, tenant=f"{tenant}-g", metadata={"path": "widen"})])


def dynamic_by_api_key(tenant: str) -> Run:
    """The graph bound to the API key (the gateway sets ``key_name``); the tenant's preset
    still holds on every model the graph names."""
    return _run([request(1, tenant=tenant, key_name="graph-key")])


def preset_narrowed_mid_request(tenant: str) -> Run:
    """Attempt 1 went out before the tenant's preset narrowed (a new policy version) and
    got a 429, which a retry on the same deployment may mend: the attempts after it are
    decided under the narrowed preset, never on that deployment again."""
    current = [policy(presets=False)]
    driver = Driver(lambda: current[0])

    def narrowing(decision: Decision) -> StatusClass:
        current[0] = POLICY  # the preset narrows while the attempt is out
        return StatusClass.RATE_LIMITED if decision.attempt == 1 else failing(decision)

    log = _log(current[0], narrowing)
    log.run([request(1, tenant=tenant, provider={"order": ["openai-x"]})], driver)
    first, *later = log.decisions
    assert (first.attempt, first.deployment) == (1, "openai-x:gpt")
    return Run({"r1"}, later, log.responses)


def _warmed(
    warm_up: list[RequestAccepted],
    tested: list[RequestAccepted],
    before: Policy,
    after: Policy = POLICY,
) -> Run:
    """``warm_up`` answered under ``before`` with a prompt-cache read (it pins its session
    and context), then ``tested`` folded under ``after``, failing."""
    current = [before]
    driver = Driver(lambda: current[0])
    warm = _log(before, succeeding)
    warm.run(list(warm_up), driver)
    assert [r.status for r in warm.responses] == ["ok"] * len(warm_up)
    current[0] = after
    log = _log(after, failing)
    log.events = dict(warm.events)
    log.run(list(tested), driver)
    sent = {e.request.request_id for e in tested}
    return Run(sent, log.decisions, log.responses, pinned_to=warm.decisions[-1].deployment)


def session_affinity(tenant: str | None, after: Policy = POLICY) -> Run:
    """The tenant's session pinned (by a cache read) to a deployment before its preset
    narrowed; an unrestricted request of the same session id pinned it too."""
    warm_up = [
        request(1, tenant=tenant, model="openai-x:gpt", session="s1", user="first"),
        request(2, tenant=None, model="openai-x:gpt", session="s1", user="other"),
    ]
    tested = [request(10, tenant=tenant, session="s1", user="next")]
    return _warmed(warm_up, tested, policy(presets=False), after)


def context_affinity(tenant: str | None, after: Policy = POLICY) -> Run:
    """An unrestricted request's prompt-cache read pinned the shared prefix (system prompt
    and first user message) to a deployment the tenant may not use."""
    warm_up = [request(1, tenant=None, model="openai-x:gpt", user="same question")]
    tested = [request(10, tenant=tenant, user="same question")]
    return _warmed(warm_up, tested, POLICY, after)


PATHS: dict[str, Path] = {
    f.__name__: f
    for f in (
        alias,
        suffix,
        mode,
        sort,
        widening_request,
        narrowing_request,
        nothing_left_by_request,
        pin_allowed,
        pin_forbidden,
        pin_forbidden_suffixed,
        auto,
        auto_nothing_left,
        local_first,
        nothing_allowed,
        dynamic_main,
        dynamic_auto,
        dynamic_split,
        dynamic_pin,
        dynamic_forbidden_route,
        dynamic_widen,
        dynamic_by_api_key,
        preset_narrowed_mid_request,
        session_affinity,
        context_affinity,
    )
}


def _route_deployments(route: str) -> list[str]:
    return [DEPLOYMENT[p.id] for p in POLICY.config.route_providers(route)]


@pytest.mark.parametrize("tenant", sorted(PRESETS))
@pytest.mark.parametrize("path", list(PATHS))
def test_no_dispatch_escapes_the_tenants_preset(path: str, tenant: str) -> None:
    run = PATHS[path](tenant)
    allowed = ALLOWED[tenant] & (ALLOWED[tenant] if run.narrowed_to is None else run.narrowed_to)
    escaped = [
        (d.request_id, d.attempt, d.route, d.deployment, d.selection_rule)
        for d in run.decisions
        if d.provider not in allowed
    ]
    assert escaped == [], f"{path}: {tenant} dispatched to deployments it may not use"
    if run.pinned_to is not None:
        assert run.pinned_to.partition(":")[0] not in allowed
        assert all(d.selection_rule != "affinity" for d in run.decisions)
    # Every request ends, once, with an error: every attempt failed or nothing is allowed.
    assert sorted(r.request_id for r in run.responses) == sorted(run.sent)
    assert all(r.status == "error" for r in run.responses)
    tried = {d.request_id for d in run.decisions}
    for response in run.responses:
        assert response.error is not None
        if response.request_id not in tried:  # refused before any call: the rule named
            assert (response.error.code, response.error.http_status) in RULE_ANSWERS, (
                path,
                response.error,
            )
            assert any(rule in response.error.message for rule in RULES), response.error
    # Each decision traces every deployment of its route the tenant may not use, with
    # the rule (a pin leaves the others out as not pinned; the local model, after its
    # turn, is never a cloud candidate).
    for decision in run.decisions:
        reasons = {e.deployment: e.reason for e in decision.excluded}
        for deployment in _route_deployments(decision.route):
            if deployment.partition(":")[0] in allowed:
                continue
            expected = set(RULES)
            if decision.candidate_filter == "pinned":
                expected.add("not_pinned")
            if decision.attempt > 1 and deployment == DEPLOYMENT["local-smol"]:
                expected.add("local_first_only")
            assert reasons.get(deployment) in expected, (path, decision.attempt, deployment)


@pytest.mark.parametrize("tenant", sorted(PRESETS))
def test_a_tenant_left_nothing_is_refused_naming_the_rule(tenant: str) -> None:
    run = nothing_allowed(tenant)
    assert run.decisions == []
    (response,) = run.responses
    assert response.error is not None
    assert (response.error.code, response.error.http_status) in RULE_ANSWERS
    for deployment in _route_deployments("us"):
        assert deployment in response.error.message


@pytest.mark.parametrize("path", ["session_affinity", "context_affinity"])
def test_the_affinity_paths_pin_what_an_unrestricted_request_follows(path: str) -> None:
    """The pins the affinity paths set up are live: without the presets (the session's
    tenant before they narrowed; any tenant for a shared context) the request follows it."""
    unrestricted = policy(presets=False)
    if path == "session_affinity":
        run = session_affinity("narrow", unrestricted)
    else:
        run = context_affinity(None, unrestricted)
    first = run.decisions[0]
    assert (first.deployment, first.selection_rule) == ("openai-x:gpt", "affinity")


@pytest.mark.parametrize("tenant", sorted(PRESETS))
@pytest.mark.parametrize("path", [dynamic_pin, dynamic_forbidden_route])
def test_a_model_the_tenant_may_not_use_passes_the_request_to_the_next_one(
    path: Path, tenant: str
) -> None:
    """A model node whose deployments the tenant may not use (a pin, a whole route) is
    passed over for its fallback model, whichever rule (lists or data) forbids it."""
    run = path(tenant)
    assert {d.route for d in run.decisions} == {"cheap"}
    assert {d.provider for d in run.decisions} <= ALLOWED[tenant]
    (response,) = run.responses
    assert response.error is not None and response.error.code not in {"no_candidate"}
