"""The response cache in the fold (pure): hits and misses, who may be cached, expiry on
event time, eviction, the policy turning it off, a hit's decision and response, no text
in the state or the decisions, the source's answer recalled from the log, replay and the
counterfactual without the cache."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import pytest
from auto_factories import auto_policy, request
from factories import T0
from log_harness import Log, recorded, replayed

from app.audit.counterfactual import counterfactual
from app.contract import (
    AttemptFinished,
    Decision,
    Dispatch,
    PolicyChanged,
    PolicyDocument,
    RequestAccepted,
    derived_id,
)
from app.routing import cache, rows
from app.routing.answers import at
from app.routing.book import document_hash, params_document
from app.routing.driver import Driver
from app.routing.fold import Want
from app.routing.policy import Policy
from app.understanding import embedding

QUESTION = "What is the boiling point of water at sea level?"


def cached_policy(**cache: Any) -> Policy:
    """The test route (five deployments, no auto) with a response cache."""
    return auto_policy(None, cache={"ttl_s": 600.0, **cache})


@dataclass
class AnswerLog(Log):
    """The harness's log whose answers name their request and cost $0.002 each."""

    cost: float = 0.002
    driver: Driver | None = None

    def finished(self, dispatch: Dispatch) -> AttemptFinished:
        event = super().finished(dispatch)
        if event.completion is None:
            return event
        request_id = dispatch.decision.request_id
        message = {"role": "assistant", "content": f"the answer to {request_id}"}
        completion = {"id": f"chatcmpl-{request_id}", "choices": [{"message": message}]}
        return event.model_copy(update={"completion": completion})


def ask(
    policy: Policy, n: int, user: str = QUESTION, *, t: float | None = None, **fields: Any
) -> RequestAccepted:
    values: dict[str, Any] = {"temperature": 0, **fields}
    return request(
        policy, n, user, model="chat", t=t, **{k: v for k, v in values.items() if v is not None}
    )


def run(policy: Policy, *requests: RequestAccepted, log: AnswerLog | None = None) -> AnswerLog:
    log = log or AnswerLog(policy)
    for accepted in requests:
        log.driver = log.run([accepted], log.driver)
    return log


def decision_of(log: Log, request_id: str) -> Decision:
    return log.first_decisions()[request_id]


def answer_of(log: Log, request_id: str) -> str:
    response = next(r for r in log.responses if r.request_id == request_id)
    assert response.status == "ok" and response.completion is not None
    content: str = response.completion["choices"][0]["message"]["content"]
    return content


def test_the_same_question_again_is_answered_from_the_cache() -> None:
    policy = cached_policy()
    log = run(policy, ask(policy, 0), ask(policy, 1))
    first, again = decision_of(log, "r0"), decision_of(log, "r1")
    assert first.selection_rule != "cache" and first.cache is None
    assert again.selection_rule == "cache" and again.algorithm_version == "switchyard-cache/1"
    assert again.deployment == first.deployment and again.candidates == []
    trace = again.cache
    assert trace is not None and trace.kind == "exact" and trace.source_request_id == "r0"
    assert (trace.cost_usd, trace.saved_usd, trace.similarity) == (0.0, 0.002, 1.0)
    source = log.events[trace.source_position]
    assert isinstance(source, AttemptFinished) and source.outcome.request_id == "r0"
    # No provider call: one dispatch in all; the answer is r0's, as r1's response.
    assert [d.request_id for d in log.decisions if d.selection_rule != "cache"] == ["r0"]
    response = next(r for r in log.responses if r.request_id == "r1")
    assert response.id == derived_id("response", "r1")
    assert (response.attempts, response.deployment) == (0, first.deployment)
    assert answer_of(log, "r1") == "the answer to r0"
    assert log.costs == [0.002]


def test_another_question_tenant_or_parameter_is_a_miss() -> None:
    policy = cached_policy()
    log = run(
        policy,
        ask(policy, 0),
        ask(policy, 1, "What is the boiling point of water on Everest?"),
        ask(policy, 2, tenant="acme"),
        ask(policy, 3, max_tokens=50),
        ask(policy, 4, tools=[{"type": "function", "function": {"name": "f"}}]),
    )
    assert all(d.selection_rule != "cache" for d in log.decisions)
    assert len(log.costs) == 5


@pytest.mark.parametrize(
    ("fields", "cached"),
    [
        ({"temperature": 0.7}, False),
        ({"temperature": None}, False),  # the provider's default: not deterministic
        ({"temperature": 0.7, "routing": {"cache": True}}, True),  # the request opts in
        ({"temperature": 0, "routing": {"cache": False}}, False),  # the request opts out
    ],
)
def test_only_temperature_zero_or_an_opt_in_is_cached(fields: dict[str, Any], cached: bool) -> None:
    policy = cached_policy()
    first, again = ask(policy, 0, **fields), ask(policy, 1, **fields)
    assert (first.cache is not None) is cached
    log = run(policy, first, again)
    assert (decision_of(log, "r1").selection_rule == "cache") is cached
    assert len(log.costs) == (1 if cached else 2)


def test_a_route_without_cache_computes_no_key() -> None:
    policy = auto_policy(None)
    assert ask(policy, 0).cache is None


def test_an_entry_expires_with_ttl_on_the_route_clock() -> None:
    policy = cached_policy(ttl_s=100.0)
    log = run(policy, ask(policy, 0), ask(policy, 1, t=T0 + 90), ask(policy, 2, t=T0 + 200))
    assert decision_of(log, "r1").selection_rule == "cache"  # answered at T0 + 1: 89 s old
    assert decision_of(log, "r2").selection_rule != "cache"  # 199 s: expired, called again
    assert decision_of(log, "r1").cache.age_s == 89.0  # type: ignore[union-attr]


def test_the_oldest_entry_is_evicted_beyond_max_entries() -> None:
    policy = cached_policy(max_entries=2)
    questions = ["What is DNS?", "What is TCP?", "What is UDP?"]
    log = run(policy, *[ask(policy, n, q) for n, q in enumerate(questions)])
    log = run(policy, ask(policy, 3, questions[0]), ask(policy, 4, questions[2]), log=log)
    assert decision_of(log, "r3").selection_rule != "cache"  # evicted by the third
    assert decision_of(log, "r4").selection_rule == "cache"
    assert len(log.costs) == 4
    assert log.driver is not None and len(log.driver.state("chat").cache.entries) == 2


def test_a_policy_without_the_cache_stops_hits_and_drops_the_entries() -> None:
    on, off = cached_policy(), auto_policy(None)
    current = [on]
    driver = Driver(lambda: current[0])
    log = AnswerLog(on)
    driver = log.run([ask(on, 0)], driver)
    assert driver.state("chat").cache.entries
    current[0] = off
    driver = log.run([ask(on, 1)], driver)
    assert decision_of(log, "r1").selection_rule != "cache"
    assert not driver.state("chat").cache.entries
    disabled = cached_policy(enabled=False)
    current[0] = disabled
    driver = log.run([ask(on, 2), ask(on, 3)], driver)
    assert all(d.selection_rule != "cache" for d in log.decisions)


def test_a_new_policy_version_starts_the_cache_empty() -> None:
    policy = cached_policy()
    log = AnswerLog(policy)
    driver = log.run([ask(policy, 0)], None)
    assert driver.state("chat").cache.entries
    config = policy.config.model_dump(mode="json", exclude={"gateway_keys": True})
    document = PolicyDocument(config=config, params=params_document(policy.params))
    change = PolicyChanged(
        id=derived_id("policy.changed", 2, "chat"),
        occurred_at=at(T0 + 2),
        route="chat",
        version=2,
        hash=document_hash(document),
        document=document,
        source="apply",
    )
    driver = log.run([change, ask(policy, 1, t=T0 + 3)], driver)
    assert decision_of(log, "r1").selection_rule != "cache"


def test_no_text_in_the_state_or_the_decisions() -> None:
    policy = cached_policy()
    log = run(policy, ask(policy, 0), ask(policy, 1))
    texts = [QUESTION, "the answer to r0"]
    for decision in log.decisions:
        assert not any(t in decision.model_dump_json() for t in texts)
    assert log.driver is not None
    row = rows.dumps(log.driver.state("chat")).decode()
    assert '"cache"' in row and not any(t in row for t in texts)
    assert "cache_serving" not in row  # a hit is answered within its step


def test_a_restarted_router_reads_the_source_answer_back_from_the_log() -> None:
    policy = cached_policy()
    log = run(policy, ask(policy, 0))
    source = max(p for p, e in log.events.items() if isinstance(e, AttemptFinished))
    live = Driver(lambda: policy)
    for position, event in sorted(log.events.items()):
        live.fold(event, position, log.events)
    # A restart: the row is read back, the memory is empty.
    restarted = Driver(lambda: policy, states={"chat": rows.loads(rows.dumps(live.state("chat")))})
    position = max(log.events) + 1
    run_step = restarted.steps(ask(policy, 1, t=T0 + 5), position)
    want = next(run_step)
    assert want == Want("cached", source, "r1")
    try:
        run_step.send((source, log.events[source]))
    except StopIteration as done:
        step = done.value
    assert [d.selection_rule for d in step.decisions] == ["cache"]
    assert step.responses[0].completion == log.events[source].completion  # type: ignore[union-attr]
    assert not step.state.cache.serving


def test_a_log_with_hits_replays_exactly() -> None:
    policy = cached_policy()
    requests = [ask(policy, n, f"question {n % 3}", t=T0 + 10 * n) for n in range(9)]
    log = run(policy, *requests)
    hits = [d for d in log.decisions if d.selection_rule == "cache"]
    assert len(hits) == 6
    report = replayed(log, policy)
    assert (report.mismatched, report.recorded, report.reproduced) == (0, 9, 9)
    assert report.responses_reproduced == 9


def test_the_counterfactual_without_the_cache_makes_the_calls_it_saved() -> None:
    policy = cached_policy()
    requests = [ask(policy, n, f"question {n % 2}", t=T0 + 10 * n) for n in range(6)]
    log = run(policy, *requests)
    report = counterfactual(recorded(log), auto_policy(None), "no cache", runs=1)
    assert (report.recorded.attempts, report.recorded.cache_hits) == (2, 4)
    assert (report.runs[0].attempts, report.runs[0].cache_hits) == (6, 0)
    assert report.recorded.requests_ok == 1.0


@pytest.mark.skipif(embedding.missing_reason() is not None, reason=str(embedding.missing_reason()))
def test_a_paraphrase_is_a_semantic_hit_above_the_threshold() -> None:
    policy = cached_policy(semantic={"threshold": 0.85})
    paraphrase = "What is the boiling temperature of water at sea level?"  # 0.90
    near_miss = "What is the freezing point of water at sea level?"  # 0.69: another answer
    first = ask(policy, 0)
    assert first.cache is not None and first.cache.embedder == embedding.EMBEDDER
    assert first.cache.vector is not None and QUESTION not in json.dumps(first.cache.model_dump())
    log = run(policy, first, ask(policy, 1, paraphrase), ask(policy, 2, near_miss))
    trace = decision_of(log, "r1").cache
    assert trace is not None and trace.kind == "semantic" and trace.threshold == 0.85
    assert 0.85 <= trace.similarity < 1.0
    assert answer_of(log, "r1") == "the answer to r0"
    assert decision_of(log, "r2").selection_rule != "cache"
    assert replayed(log, policy).mismatched == 0
    strict = cached_policy(semantic={"threshold": 0.95})
    log = run(strict, ask(strict, 0), ask(strict, 1, paraphrase))
    assert decision_of(log, "r1").selection_rule != "cache"
    assert replayed(log, strict).mismatched == 0


def test_similarities_are_the_same_integers_with_and_without_numpy() -> None:
    rng = random.Random(7)
    query = bytes(rng.randrange(256) for _ in range(256))
    vectors = [bytes(rng.randrange(256) for _ in range(256)) for _ in range(50)]
    vectors.append(bytes([0x81] * 256))  # -127 everywhere: the extreme products
    assert cache._dots(query, vectors) == cache._dots_python(query, vectors)
