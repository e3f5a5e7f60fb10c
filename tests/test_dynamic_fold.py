"""Dynamic routes in the fold: branches, a stable split, fallbacks, rate
nodes, refusals — through the one driver, replayed exactly."""

from __future__ import annotations

from typing import Any

import pytest
from factories import T0, accepted, params, provider
from log_harness import Log, always, replayed

from app.config.schema import ConfigError, RouteConfig, RoutingConfig, parse_config
from app.contract import Decision, RequestAccepted, RoutingLogEvent, StatusClass
from app.routing.policy import Policy

GRAPH: dict[str, Any] = {
    "bind": [{"tenant": "acme"}],
    "start": "team",
    "nodes": {
        "team": {
            "kind": "condition",
            "when": {"metadata": {"team": "platform"}},
            "true": "pinned",
            "false": "rate",
        },
        "pinned": {"kind": "model", "target": "b:m1", "mode": "latency"},
        "rate": {
            "kind": "rate",
            "requests": 3,
            "window_s": 60,
            "within": "split",
            "exceeded": "slow",
        },
        "split": {
            "kind": "split",
            "branches": [{"percent": 10, "to": "canary"}, {"percent": 90, "to": "main"}],
        },
        "canary": {"kind": "model", "target": "cheap"},
        "main": {"kind": "model", "target": "chat", "fallback_models": ["cheap", "c:m1"]},
        "slow": {"kind": "refuse", "code": "tenant_rate_limited", "status": 429},
    },
}


def config(graph: dict[str, Any] = GRAPH) -> RoutingConfig:
    return RoutingConfig(
        providers=[provider("a"), provider("b"), provider("c")],
        routes={
            "chat": RouteConfig(providers=["a", "b"]),
            "cheap": RouteConfig(providers=["c"]),
        },
        dynamic_routes={"g": graph},  # type: ignore[arg-type]
    )


def dynamic_policy(graph: dict[str, Any] = GRAPH, **overrides: Any) -> Policy:
    values = {"cb_failure_threshold": 10_000, "max_attempts": 2, **overrides}
    return Policy(config(graph), params(**values))


def request(
    n: int, *, tenant: str | None = "acme", session: str | None = None, **meta: str
) -> RequestAccepted:
    event = accepted(f"r{n}", T0 + n, offset=n)
    body = event.request.model_copy(
        update={"tenant": tenant, "session_id": session, "metadata": dict(meta)}
    )
    return event.model_copy(update={"request": body})


def test_a_condition_pins_with_its_mode_and_the_other_branch_is_routed() -> None:
    log = Log(dynamic_policy())
    log.run([request(0, team="platform"), request(1, team="web", session="s-main")])
    decisions = log.first_decisions()
    pinned = decisions["r0"]
    assert (pinned.deployment, pinned.candidate_filter, pinned.mode) == (
        "b:m1",
        "pinned",
        "latency",
    )
    assert pinned.dynamic is not None and pinned.dynamic.graph == "g"
    steps = pinned.dynamic.path["steps"]
    assert [(s["node"], s["exit"]) for s in steps] == [("team", "true")]
    other = decisions["r1"].dynamic
    assert other is not None
    assert [s["node"] for s in other.path["steps"]] == ["team", "rate", "split"]
    assert all(r.status == "ok" for r in log.responses)


def test_requests_of_unbound_tenants_walk_nothing() -> None:
    log = Log(dynamic_policy())
    log.run([request(0, tenant=None), request(1, tenant="other")])
    assert all(d.dynamic is None and d.route == "chat" for d in log.decisions)


def test_the_split_is_stable_per_session_across_restarts_and_reloads() -> None:
    sessions = [f"s{i}" for i in range(200)]
    branches = []
    for run in range(2):  # a new driver: a restart; run 1 also with a reloaded policy
        policy = dynamic_policy() if run == 0 else dynamic_policy(retry_backoff_s=0.2)
        log = Log(policy)
        # Rate node: 3 a minute; one request a minute per session keeps within it.
        driver = None
        for i, session in enumerate(sessions):  # each answered before the next comes
            driver = log.run([request(i * 60, session=session)], driver)
        chosen = log.first_decisions()
        branches.append([chosen[f"r{i * 60}"].route for i in range(len(sessions))])
    assert branches[0] == branches[1]
    share = branches[0].count("cheap") / len(sessions)
    assert 0.04 <= share <= 0.18  # 10 % of 200 sessions


def test_fallback_models_in_order_after_5xx_but_not_after_400() -> None:
    def failing_on_chat(decision: Decision) -> StatusClass:
        return StatusClass.SUCCESS if decision.deployment == "c:m1" else StatusClass.SERVER_ERROR

    log = Log(dynamic_policy(), status=failing_on_chat)
    log.run([request(0, session="s-main")])
    (answer,) = log.responses
    tried = [(d.route, d.deployment, d.attempt) for d in log.decisions]
    # main: 2 attempts on chat, then fallback "cheap" (route of c): ok at attempt 3.
    assert [t[0] for t in tried] == ["chat", "chat", "cheap"]
    assert [t[2] for t in tried] == [1, 2, 3]
    assert answer.status == "ok" and answer.attempts == 3
    assert log.decisions[-1].dynamic is not None
    assert log.decisions[-1].dynamic.fallbacks == ["c:m1"]

    refused = Log(dynamic_policy(), status=always(StatusClass.CLIENT_ERROR))
    refused.run([request(0, session="s-main")])
    assert [d.route for d in refused.decisions] == ["chat"]
    assert refused.responses[0].status == "error"


def test_every_fallback_failing_answers_the_last_error() -> None:
    log = Log(dynamic_policy(), status=always(StatusClass.SERVER_ERROR))
    log.run([request(0, session="s-main")])
    # chat twice; fallback "cheap": one deployment, and a fallback model left, so one
    # attempt; fallback "c:m1" is a pin, the last model: its deployment is the best
    # remaining candidate, tried again after a 5xx up to the route's attempts (two);
    # then the last error is the answer.
    tried = [(d.route, d.deployment, d.attempt, d.selection_rule) for d in log.decisions]
    assert tried == [
        ("chat", "a:m1", 1, "untried_first"),
        ("chat", "b:m1", 2, "untried_first"),
        ("cheap", "c:m1", 3, "untried_first"),
        ("cheap", "c:m1", 4, "score"),
        ("cheap", "c:m1", 5, "retry_same_deployment"),
    ]
    assert log.decisions[-1].candidate_filter == "pinned"
    (answer,) = log.responses
    assert answer.status == "error" and answer.attempts == 5


def test_a_rate_node_takes_its_exceeded_exit() -> None:
    log = Log(dynamic_policy())
    log.run([request(n, session="s-main") for n in range(5)])
    refused = [r for r in log.responses if r.status == "error"]
    assert [r.request_id for r in refused] == ["r3", "r4"]
    assert {(r.error.code, r.error.http_status) for r in refused if r.error} == {
        ("tenant_rate_limited", 429)
    }


def test_a_log_with_dynamic_routes_replays_exactly() -> None:
    def flaky(decision: Decision) -> StatusClass:
        return StatusClass.SERVER_ERROR if decision.attempt == 1 else StatusClass.SUCCESS

    policy = dynamic_policy()
    log = Log(policy, status=flaky)
    events: list[RoutingLogEvent] = [
        request(n * 30, session=f"s{n}", team="platform" if n % 3 == 0 else "web")
        for n in range(40)
    ]
    driver = None
    for event in events:
        driver = log.run([event], driver)
    report = replayed(log, policy)
    assert report.ok and report.mismatched == 0
    assert report.reproduced == len(log.decisions) > 40


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"main": {"kind": "model", "target": "nowhere"}}, "'nowhere' is no route"),
        ({"canary": {"kind": "model", "target": "chat", "provider": {"only": ["zz"]}}}, "zz"),
    ],
)
def test_a_graph_naming_what_the_config_lacks_is_rejected(
    change: dict[str, Any], message: str
) -> None:
    graph = {**GRAPH, "nodes": {**GRAPH["nodes"], **change}}
    data = config().model_dump(mode="json", exclude={"gateway_keys"})
    data["providers"] = [{**p, "api_key": "k"} for p in data["providers"]]
    data["dynamic_routes"] = {"g": graph}
    with pytest.raises(ConfigError, match=message):
        parse_config(data, {})
