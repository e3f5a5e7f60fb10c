"""Dynamic routes: the graph's format, its checks and its walk."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
import yaml

from app.config.dynamic_routes import DynamicRoutes, GraphError, RouteGraph, parse_dynamic_routes
from app.config.schema import parse_config
from app.contract import StatusClass
from app.contract.features import Features
from app.contract.request import ChatMessage, ChatRequest
from app.routing.graph import (
    BudgetCheck,
    RateCheck,
    RequestFacts,
    check_against,
    split_key,
    walk,
)
from app.routing.reliability import classify_http_status, moves_on

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "dynamic-routes.md"
M = "{kind: model, target: chat}"
TARGETS = {"chat", "chat-cheap", "openai-main:gpt-4o-mini", "fb1", "fb2", "fb3"}


class FakeCounters:
    """Answers ``within`` unless the node is listed; records every check."""

    def __init__(self, exceeded: Sequence[str] = ()) -> None:
        self.exceeded = set(exceeded)
        self.checks: list[RateCheck | BudgetCheck] = []

    def rate_within(self, check: RateCheck) -> bool:
        self.checks.append(check)
        return check.node not in self.exceeded

    def budget_within(self, check: BudgetCheck) -> bool:
        self.checks.append(check)
        return check.node not in self.exceeded


def model(target: str = "chat", **fields: Any) -> dict[str, Any]:
    return {"kind": "model", "target": target, **fields}


def graph(nodes: dict[str, Any], start: str = "a", **fields: Any) -> dict[str, Any]:
    return {"bind": [{"tenant": "acme"}], "start": start, "nodes": nodes, **fields}


def parse(*graphs: dict[str, Any]) -> DynamicRoutes:
    return parse_dynamic_routes({f"g{i}": g for i, g in enumerate(graphs)}, targets=TARGETS)


def one(nodes: dict[str, Any], start: str = "a") -> RouteGraph:
    return parse(graph(nodes, start)).root["g0"]


def doc_section() -> Any:
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert block is not None
    return yaml.safe_load(block.group(1))["dynamic_routes"]


def split_graph(canary: float = 10, salt: str = "") -> RouteGraph:
    text = f"""
      a: {{kind: split, salt: {salt or "null"}, branches: [{{percent: {canary}, to: canary}},
          {{percent: {100 - canary}, to: stable}}]}}
      canary: {{kind: model, target: chat-cheap}}
      stable: {{kind: model, target: chat}}
    """
    return one(yaml.safe_load(text))


def end_of(g: RouteGraph, **facts: Any) -> str:
    return walk(g, RequestFacts(request_id="r", **facts), FakeCounters()).end


# --- the documented example ----------------------------------------------------------


def test_the_documented_example_loads_and_checks_against_a_config() -> None:
    config = parse_config(
        yaml.safe_load("""
          providers: [{id: openai-main, base_url: "https://x.test/v1",
                       models: [{name: gpt-4o-mini}]}]
          routes: {chat: {providers: [openai-main]}, chat-cheap: {providers: [openai-main]}}
        """),
        env={},
    )
    routes = parse_dynamic_routes(doc_section())
    check_against(routes, config)
    support = routes.root["support"]
    assert routes.graph_for(tenant="acme", api_key=None) is support
    assert routes.graph_for(tenant="other", api_key="support-bot") is support
    assert routes.graph_for(tenant="other", api_key=None) is None
    path = walk(support, RequestFacts("r", tenant="acme", has_tools=True), FakeCounters())
    assert [(s.node, s.exit) for s in path.steps] == [
        ("has_tools", "true"),
        ("agents_rate", "within"),
    ]
    assert path.end == "agents" and path.model is not None and path.model.mode == "latency"
    assert json.loads(json.dumps(path.trace()))["terminal"]["target"] == "chat"


# --- conditions --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "facts", "expected"),
    [
        ({"tenant": ["acme", "globex"]}, {"tenant": "globex"}, True),
        ({"api_key": "k1"}, {"api_key": "k2"}, False),
        ({"metadata": {"team": "platform-*"}}, {"metadata": {"team": "platform-a"}}, True),
        ({"metadata": {"team": "*"}}, {"metadata": {}}, False),
        ({"model": "gpt-4*"}, {"model": "gpt-4o"}, True),
        ({"model": "gpt-4*"}, {"model": "GPT-4o"}, False),
        ({"model": "*"}, {}, True),
        ({"domain": ["coding", "math"]}, {"domain": "math"}, True),
        ({"domain": "coding"}, {}, False),
        ({"has_tools": True}, {"has_tools": True}, True),
        ({"has_tools": False}, {"has_tools": True}, False),
        ({"prompt_chars": {"at_least": 1000}}, {"prompt_chars": 1000}, True),
        ({"prompt_chars": {"at_least": 1000}}, {"prompt_chars": 999}, False),
        ({"prompt_chars": {"below": 1000}}, {"prompt_chars": 1000}, False),
        ({"tenant": "acme", "has_tools": True}, {"tenant": "acme"}, False),
        ({"tenant": "acme", "has_tools": True}, {"tenant": "acme", "has_tools": True}, True),
    ],
)
def test_condition_branches(when: dict[str, Any], facts: dict[str, Any], expected: bool) -> None:
    text = (
        f"{{a: {{kind: condition, when: {json.dumps(when)}, true: t, false: f}}, t: {M}, f: {M}}}"
    )
    g = one(yaml.safe_load(text))  # YAML reads ``true:`` and ``false:`` as booleans
    path = walk(g, RequestFacts(request_id="r", **facts), FakeCounters())
    assert path.steps[0].exit == ("true" if expected else "false")
    assert path.end == ("t" if expected else "f")


def test_facts_of_a_request() -> None:
    request = ChatRequest(
        request_id="r1",
        messages=[ChatMessage(role="user", content="hi")],
        model="chat",
        tenant="acme",
        session_id="s1",
        metadata={"team": "x"},
        tools=[{"type": "function"}],
    )
    features = Features.model_validate(
        yaml.safe_load("""
          {rules_version: v, task_type: coding, domain: null, has_code: true, is_creative: false,
           is_realtime: false, length_bucket: short, prompt_chars: 42, modality: text,
           input_modalities: [text], requested_modalities: []}
        """)
    )
    facts = RequestFacts.of(request, features, api_key="k1", prompt_cache_key="c1")
    assert (facts.tenant, facts.api_key, facts.domain) == ("acme", "k1", "coding")
    assert facts.prompt_chars == 42
    assert facts.has_tools and facts.metadata == {"team": "x"}
    assert split_key(facts) == ("session_id", "s1")
    assert RequestFacts.of(request, None).domain == "general"


# --- splits ------------------------------------------------------------------------------


def branches(g: RouteGraph, sessions: range) -> list[str]:
    return [end_of(g, session_id=f"session-{i}") for i in sessions]


def test_a_10_90_split_is_stable_per_session_and_near_its_share() -> None:
    first = split_graph()
    nodes = {
        "a": {
            "kind": "split",
            "branches": [{"percent": 10.0, "to": "canary"}, {"percent": 90, "to": "stable"}],
        },
        "canary": model("chat-cheap"),
        "stable": model("chat"),
    }
    second = parse_dynamic_routes({"g0": graph(nodes)}).root["g0"]  # built anew, another way
    assert branches(first, range(1000)) == branches(second, range(1000))
    for i in range(1000):  # the same session, whatever the request
        facts = RequestFacts(request_id=f"other-{i}", session_id=f"session-{i}")
        assert walk(first, facts, FakeCounters()).end == end_of(first, session_id=f"session-{i}")
    share = branches(first, range(10_000)).count("canary") / 10_000
    assert abs(share - 0.10) <= 0.03, share


def test_a_split_is_the_same_in_a_fresh_process_with_another_hash_seed() -> None:
    code = (
        "import json, sys\n"
        "sys.path.insert(0, 'tests')\n"
        "from test_route_graph import branches, split_graph\n"
        "print(json.dumps(branches(split_graph(), range(1000))))"
    )
    root = pathlib.Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, check=True, capture_output=True, text=True
    ).stdout
    assert json.loads(out) == branches(split_graph(), range(1000))


def test_a_reload_keeps_sessions_and_a_ramp_only_moves_sessions_onto_the_canary() -> None:
    before = branches(split_graph(10), range(2000))
    reloaded = parse(
        graph(split_graph(10).model_dump(mode="json")["nodes"], bind=[{"tenant": "new"}])
    )
    assert branches(reloaded.root["g0"], range(2000)) == before
    ramped = branches(split_graph(20), range(2000))
    assert all(r == "canary" for b, r in zip(before, ramped, strict=True) if b == "canary")
    assert ramped.count("canary") > before.count("canary")
    assert branches(split_graph(10, salt="experiment-2"), range(2000)) != before


def test_a_split_key_is_the_session_then_the_prompt_cache_key_then_the_request() -> None:
    assert split_key(RequestFacts("r", session_id="s", prompt_cache_key="c")) == ("session_id", "s")
    assert split_key(RequestFacts("r", prompt_cache_key="c")) == ("prompt_cache_key", "c")
    assert split_key(RequestFacts("r")) == ("request_id", "r")
    step = walk(split_graph(), RequestFacts("r", prompt_cache_key="c"), FakeCounters()).steps[0]
    assert step.detail is not None and step.detail.startswith("prompt_cache_key bucket ")


# --- rate and budget nodes ----------------------------------------------------------


def gated() -> RouteGraph:
    text = """
      a: {kind: rate, requests: 10, window_s: 60, per: api_key, within: b, exceeded: slow}
      b: {kind: budget, usd: 5, period: month, per: route, within: ok, exceeded: cheap}
      ok: {kind: model, target: chat}
      cheap: {kind: model, target: chat-cheap}
      slow: {kind: refuse, code: rate_limited, status: 429}
    """
    return one(yaml.safe_load(text))


def test_a_rate_nodes_exceeded_exit() -> None:
    counters = FakeCounters(exceeded=["a"])
    path = walk(gated(), RequestFacts("r", tenant="acme", api_key="k1"), counters)
    assert [(s.node, s.exit) for s in path.steps] == [("a", "exceeded")]
    refusal = path.refusal
    assert refusal is not None and (refusal.code, refusal.status) == ("rate_limited", 429)
    assert path.model is None
    [check] = counters.checks
    assert isinstance(check, RateCheck) and check.key == ("g0", "a", "k1")
    assert check.spec.requests == 10


def test_a_budget_nodes_exits_count_the_route() -> None:
    counters = FakeCounters(exceeded=["b"])
    path = walk(gated(), RequestFacts("r", tenant="acme", api_key="k1"), counters)
    assert [(s.node, s.exit) for s in path.steps] == [("a", "within"), ("b", "exceeded")]
    assert path.end == "cheap" and counters.checks[1].key == ("g0", "b", "g0")
    assert walk(gated(), RequestFacts("r", api_key="k1"), FakeCounters()).end == "ok"


# --- fallback models -------------------------------------------------------------------


def test_fallback_models_follow_every_provider_failure_but_no_client_error() -> None:
    """Statuses or none: a timeout, a reset or a cut stream moves on like a 503 does."""
    for status in (429, 500, 502, 503, 504, 529):
        assert moves_on(classify_http_status(status).value, status), status
    for kind in (StatusClass.TIMEOUT, StatusClass.CONNECTION_ERROR, StatusClass.BAD_RESPONSE):
        assert moves_on(kind.value, None), kind
    assert moves_on("no_deployment_available", 503)
    for status in (400, 401, 403, 404, 413, 422, 501):
        assert not moves_on(classify_http_status(status).value, status), status
    for kind in ("deadline_exceeded", "route_refused", "guardrail", "lost", "expired"):
        assert not moves_on(kind, 504), kind


# --- invalid graphs ----------------------------------------------------------------------

IF = "{kind: condition, when: {tenant: x}, "
#: name → (the graph's YAML, its one error). Every graph starts at ``a``, bound to ``acme``.
INVALID: dict[str, tuple[str, str]] = {
    "cycle": (
        f"nodes: {{a: {IF}true: b, false: m}}, b: {IF}true: a, false: m}}, m: {M}}}",
        "dynamic_routes.g0: node 'a': cycle a -> b -> a",
    ),
    "self loop": (f"nodes: {{a: {IF}true: a, false: m}}, m: {M}}}", "node 'a': cycle a -> a"),
    "unreachable": (
        f"nodes: {{a: {M}, lost: {M}}}",
        "dynamic_routes.g0: node 'lost' is unreachable from start 'a'",
    ),
    "unknown exit target": (
        f"nodes: {{a: {IF}true: m, false: nowhere}}, m: {M}}}",
        "dynamic_routes.g0: node 'a': exit 'false' leads to unknown node 'nowhere'",
    ),
    "missing start": (f"start: null\nnodes: {{a: {M}}}", "dynamic_routes.g0.start: Field required"),
    "start no node": (
        f"start: b\nnodes: {{a: {M}}}",
        "dynamic_routes.g0: start: node 'b' does not exist",
    ),
    "nine fallbacks": (
        "nodes: {a: {kind: model, target: chat, fallback_models: [a, b, c, d, e, f, g, h, i]}}",
        "dynamic_routes.g0.nodes.a.model: 9 fallback models, at most 8",
    ),
    "percentages": (
        "nodes: {a: {kind: split, branches: [{percent: 10, to: m}, {percent: 80, to: n}]},"
        f" m: {M}, n: {M}}}",
        "dynamic_routes.g0.nodes.a.split: split percentages sum to 90, not 100",
    ),
    "three decimals": (
        "nodes: {a: {kind: split, branches: [{percent: 10.005, to: m}, {percent: 89.995, to: n}]},"
        f" m: {M}, n: {M}}}",
        "dynamic_routes.g0.nodes.a.split: split percent 10.005 has more than 2 decimals",
    ),
    "unknown model target": (
        "nodes: {a: {kind: model, target: chta}}",
        "dynamic_routes.g0.nodes.a: 'chta' is no route or provider:model of the config",
    ),
    "unknown fallback": (
        "nodes: {a: {kind: model, target: chat, fallback_models: [fb1, nope]}}",
        "dynamic_routes.g0.nodes.a: 'nope' is no route",
    ),
    "repeated fallback": (
        "nodes: {a: {kind: model, target: chat, fallback_models: [fb1, chat]}}",
        "dynamic_routes.g0.nodes.a.model: fallback model 'chat' repeats",
    ),
    "empty condition": (
        f"nodes: {{a: {{kind: condition, when: {{}}, true: m, false: m}}, m: {M}}}",
        "dynamic_routes.g0.nodes.a.condition.when: a condition must test at least one field",
    ),
    "unknown kind": ("nodes: {a: {kind: teleport}}", "dynamic_routes.g0.nodes.a: Input tag"),
    "no binding": (f"bind: []\nnodes: {{a: {M}}}", "dynamic_routes.g0.bind: List should have"),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_every_invalid_graph_is_rejected_with_one_clear_error(case: str) -> None:
    text, expected = INVALID[case]
    data = {"bind": [{"tenant": "acme"}], "start": "a", **yaml.safe_load(text)}
    data = {k: v for k, v in data.items() if v is not None}  # ``start: null``: no start
    with pytest.raises(GraphError) as raised:
        parse_dynamic_routes({"g0": data}, targets=TARGETS)
    message = str(raised.value)
    assert expected in message, message
    assert "\n" not in message


def test_two_graphs_cannot_bind_the_same_tenant_and_names_must_agree() -> None:
    with pytest.raises(
        GraphError, match=r"^dynamic_routes\.g1: tenant 'acme' is also bound to 'g0'$"
    ):
        parse(graph({"a": model()}), graph({"a": model()}))
    with pytest.raises(GraphError, match="'name' differs from the graph's key"):
        parse_dynamic_routes({"g0": graph({"a": model()}, name="other")})
    with pytest.raises(GraphError, match="unknown provider"):
        parse_dynamic_routes(
            {"g0": graph({"a": model(provider={"only": ["ghost"]})})},
            targets=TARGETS,
            providers={"openai-main"},
        )
    cooking = {"kind": "condition", "when": {"domain": "cooking"}, "true": "m", "false": "m"}
    with pytest.raises(GraphError, match=r"when\.domain: unknown domain\(s\) \['cooking'\]"):
        parse_dynamic_routes(
            {"g0": graph({"a": cooking, "m": model()})}, domains={"general"}, targets=TARGETS
        )
    assert parse_dynamic_routes(None).root == {}
