"""Cache and session affinity in the fold: pin on a real cache read,
renew, expire on event time, breakers and filters first, opt-outs, bounded, in the row."""

from __future__ import annotations

from dataclasses import replace

from auto_factories import CacheLog, auto_policy, replayed, request
from factories import T0, open_breaker

from app.config.auto import AffinityConfig
from app.contract import Decision, Outcome, RequestAccepted, StatusClass
from app.routing import affinity, rows
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.routing.state import OpenAttempt, Pin, RouteState

READ = 1500


def always_cached(_: Decision) -> int:
    return READ


def plain_policy(**affinity_config: object) -> Policy:
    """The test route without auto (the strategy ranks), affinity as configured."""
    return auto_policy(None, affinity=affinity_config) if affinity_config else auto_policy(None)


def run(
    log: CacheLog, requests: list[RequestAccepted], driver: Driver | None = None
) -> Driver | None:
    for accepted in requests:
        driver = log.run([accepted], driver)
    return driver


def test_a_cache_read_pins_the_session_to_its_deployment() -> None:
    policy = plain_policy()
    log = CacheLog(policy, cached=always_cached)
    turns = [request(policy, n, f"question {n}", model="chat", session="s1") for n in range(6)]
    run(log, turns)
    decisions = log.first_decisions()
    first = decisions["r0"].deployment
    assert decisions["r0"].selection_rule != "affinity"
    for n in range(1, 6):
        assert (decisions[f"r{n}"].deployment, decisions[f"r{n}"].selection_rule) == (
            first,
            "affinity",
        )
        assert decisions[f"r{n}"].affinity == "session"
        assert decisions[f"r{n}"].propensity == 1.0


def test_no_cache_read_no_pin() -> None:
    policy = plain_policy()
    log = CacheLog(policy)  # answers never report cached tokens
    run(log, [request(policy, n, f"q{n}", model="chat", session="s1") for n in range(6)])
    assert all(d.selection_rule != "affinity" for d in log.decisions)
    assert len({d.deployment for d in log.decisions}) > 1


def test_a_context_is_pinned_without_a_session() -> None:
    policy = plain_policy()
    log = CacheLog(policy, cached=always_cached)
    history = [{"role": "user", "content": "Tell me about Kafka."}]
    turns = [
        request(policy, 0, "Tell me about Kafka.", model="chat"),
        request(
            policy,
            1,
            "And partitions?",
            model="chat",
            history=[*history, {"role": "assistant", "content": "A log."}],
        ),
        request(policy, 2, "Something else entirely", model="chat"),  # another prefix
    ]
    run(log, turns)
    decisions = log.first_decisions()
    assert decisions["r1"].deployment == decisions["r0"].deployment
    assert (decisions["r1"].selection_rule, decisions["r1"].affinity) == ("affinity", "context")
    assert decisions["r2"].selection_rule != "affinity"


def test_each_read_renews_the_session_and_event_time_expires_it() -> None:
    policy = plain_policy()
    log = CacheLog(policy, cached=always_cached)
    times = [0, 600, 1200, 1800, 2400]  # each within 15 min of the last read
    turns = [
        request(policy, n, f"q{n}", t=T0 + when, model="chat", session="s1")
        for n, when in enumerate(times)
    ]
    driver = run(log, turns)
    late = request(policy, 9, "q9", t=T0 + 2400 + 901, model="chat", session="s1")
    run(log, [late], driver)
    decisions = log.first_decisions()
    assert [decisions[f"r{n}"].selection_rule for n in range(1, 5)] == ["affinity"] * 4
    assert decisions["r9"].selection_rule != "affinity"  # 15 min without a read: expired


def test_a_session_pin_lasts_at_most_its_maximum() -> None:
    config = AffinityConfig(session_ttl_s=900, session_max_s=3600)
    state = RouteState(clock=T0)
    keys = ("s:abc",)
    result = Outcome.model_validate(
        {
            "id": "o",
            "occurred_at": "2023-11-14T22:13:20Z",
            "request_id": "r",
            "attempt": 1,
            "route": "chat",
            "deployment": "mid:medium",
            "provider": "mid",
            "model": "medium",
            "decision_id": "d",
            "status_class": "success",
            "http_status": 200,
            "latency_ms": 100.0,
            "tokens_cached": 10,
            "reward": 1.0,
            "retriable": False,
            "final": True,
        }
    )
    policy = auto_policy(None, affinity=config.model_dump())
    for minute in range(0, 60, 10):  # a read every 10 minutes
        state = affinity.observe(replace(state, clock=T0 + 60 * minute), keys, result, policy)
    pin = state.affinity["s:abc"]
    assert pin.started == T0 and pin.until == T0 + 3600  # capped, not 50 min + 15
    assert affinity.sticks(replace(state, clock=T0 + 3599), keys)
    assert not affinity.sticks(replace(state, clock=T0 + 3600), keys)
    # Once it has lapsed, a later read starts a new pin (the request was routed afresh).
    later = affinity.observe(replace(state, clock=T0 + 3700), keys, result, policy)
    assert later.affinity["s:abc"] == Pin("mid:medium", T0 + 3700 + 900, T0 + 3700)
    failed = result.model_copy(update={"status_class": StatusClass.SERVER_ERROR})
    assert affinity.observe(RouteState(clock=T0), keys, failed, policy).affinity == {}


def test_an_open_breaker_moves_the_session_at_once() -> None:
    policy = plain_policy()
    log = CacheLog(policy, cached=always_cached)
    driver = run(log, [request(policy, n, f"q{n}", model="chat", session="s1") for n in range(3)])
    assert driver is not None
    pinned = log.decisions[-1].deployment
    state = driver.states["chat"]
    opened = replace(state.arm(pinned), breaker=open_breaker(T0 + 2))
    driver.states["chat"] = replace(state, arms={**state.arms, pinned: opened})
    run(log, [request(policy, 3, "q3", model="chat", session="s1")], driver)
    moved = log.decisions[-1]
    assert moved.deployment != pinned and moved.selection_rule != "affinity"
    assert (pinned, "breaker_open") in [(e.deployment, e.reason) for e in moved.excluded]
    # The cache read on the new deployment moves the pin there.
    run(log, [request(policy, 4, "q4", model="chat", session="s1")], driver)
    assert (log.decisions[-1].deployment, log.decisions[-1].selection_rule) == (
        moved.deployment,
        "affinity",
    )


def test_provider_lists_win_over_affinity() -> None:
    policy = plain_policy()
    log = CacheLog(policy, cached=always_cached)
    driver = run(log, [request(policy, n, f"q{n}", model="chat", session="s1") for n in range(2)])
    pinned = log.decisions[-1].deployment.partition(":")[0]
    asked = request(policy, 2, "q2", model="chat", session="s1", provider={"ignore": [pinned]})
    run(log, [asked], driver)
    assert log.decisions[-1].deployment.partition(":")[0] != pinned
    assert log.decisions[-1].selection_rule != "affinity"


def test_a_request_can_opt_out_or_ignore_its_session() -> None:
    policy = plain_policy()
    log = CacheLog(policy, cached=always_cached)
    driver = run(log, [request(policy, n, f"q{n}", model="chat", session="s1") for n in range(2)])
    assert log.decisions[-1].selection_rule == "affinity"
    out = request(policy, 2, "q2", model="chat", session="s1", routing={"affinity": False})
    ignored = request(
        policy, 3, "q3", model="chat", session="s1", routing={"session_affinity": False}
    )
    same_context = request(
        policy, 4, "q0", model="chat", session="s1", routing={"session_affinity": False}
    )
    run(log, [out, ignored, same_context], driver)
    decisions = log.first_decisions()
    assert decisions["r2"].selection_rule != "affinity"
    assert decisions["r3"].selection_rule != "affinity"  # a new prefix, session ignored
    assert (decisions["r4"].selection_rule, decisions["r4"].affinity) == ("affinity", "context")
    assert affinity.keys_of(out, policy) == ()
    assert [k[:2] for k in affinity.keys_of(ignored, policy)] == ["c:"]


def test_affinity_can_be_switched_off_on_a_route() -> None:
    policy = plain_policy(enabled=False)
    log = CacheLog(policy, cached=always_cached)
    run(log, [request(policy, n, f"q{n}", model="chat", session="s1") for n in range(4)])
    assert all(d.selection_rule != "affinity" for d in log.decisions)


def test_auto_follows_a_pin_within_its_rules() -> None:
    policy = auto_policy()
    log = CacheLog(policy, cached=always_cached)
    run(log, [request(policy, n, "hello", session="s1") for n in range(3)])
    rules = [d.selection_rule for d in log.decisions]
    assert rules == ["auto", "affinity", "affinity"]
    assert log.decisions[-1].auto is not None


def test_pins_are_bounded_and_the_soonest_to_expire_go_first() -> None:
    policy = plain_policy(max_entries=3)
    log = CacheLog(policy, cached=always_cached)
    driver = run(
        log,
        [
            request(policy, n, f"q{n}", t=T0 + 10 * n, model="chat", session=f"s{n}", system=str(n))
            for n in range(5)
        ],
    )
    assert driver is not None
    pins = driver.states["chat"].affinity
    assert len(pins) == 3
    assert sorted(p.until for p in pins.values())[0] >= T0 + 30 + 900


def test_pins_and_attempt_keys_survive_the_row() -> None:
    state = RouteState(
        clock=T0,
        affinity={"s:1": Pin("a:m1", T0 + 900, T0), "c:2": Pin("b:m1", T0 + 5, T0 - 5)},
        open_attempts={"r#1": OpenAttempt("a:m1", T0, T0 + 60, affinity=("s:1", "c:2"))},
    )
    assert rows.loads(rows.dumps(state)) == state
    old = rows.to_row(RouteState(clock=T0))
    assert "affinity" not in old  # written only when there are pins
    assert rows.from_row(old).affinity == {}
    attempt_row = rows.to_row(replace(state, affinity={}))["open_attempts"]["r#1"]
    del attempt_row["affinity"]  # a row written before affinity existed
    assert (
        rows.from_row({"open_attempts": {"r#1": attempt_row}}).open_attempts["r#1"].affinity == ()
    )


def test_a_log_with_affinity_replays_exactly() -> None:
    def flaky(decision: Decision) -> StatusClass:
        failing = decision.attempt == 1 and decision.request_id.endswith("7")
        return StatusClass.SERVER_ERROR if failing else StatusClass.SUCCESS

    policy = plain_policy()
    log = CacheLog(policy, status=flaky, cached=lambda d: READ if d.attempt == 1 else 0)
    turns = [
        request(policy, n, f"q{n}", t=T0 + 45 * n, model="chat", session=f"s{n % 4}")
        for n in range(50)
    ]
    run(log, turns)
    assert sum(d.selection_rule == "affinity" for d in log.decisions) > 30
    report = replayed(log, policy)
    assert report.ok and report.mismatched == 0
    assert report.reproduced == len(log.decisions) >= 50
