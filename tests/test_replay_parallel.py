"""Replay with its routes folded in worker processes gives the serial replay's report,
byte for byte: the same counts, the same mismatches in the same order, the same states."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from factories import T0, accepted, dep, finished, outcome, params, provider, routing_config

from app.audit.export import write_export, write_policy
from app.audit.log import Entry, RecordedLog, parse
from app.audit.replay import FoldPool, ReplayReport, policy_book, rederive, render, replay
from app.audit.replay_parallel import merge, plan, rederive_parallel, route_keys
from app.audit.replay_worker import Folded
from app.audit.synthetic import Profile, synthetic_log
from app.cli import main
from app.config.schema import Budget, RouteConfig, RoutingConfig
from app.contract import AttemptFinished, BudgetAsk, RoutingLogEvent, StatusClass, derived_id
from app.contract.policy import PolicyChanged, PolicyDocument
from app.routing.answers import at
from app.routing.book import PolicyBook, document_hash, params_document
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.routing.state import RouteState
from app.settings import Topics

CHEAP, MID, DEAR = dep("cerebras-x"), dep("groq-x"), dep("openai-x")
PROFILES = {
    CHEAP: Profile(success=0.85, latency_ms=1500.0),
    MID: Profile(success=0.9, latency_ms=900.0, failure=StatusClass.TIMEOUT),
    DEAR: Profile(success=0.97, latency_ms=600.0),
}


def routes() -> Policy:
    """Three routes over three deployments (the mid one takes 3 calls at a time)."""
    config = routing_config(
        provider("cerebras-x", cost_per_mtok_input=0.2, cost_per_mtok_output=0.6),
        provider("openai-x", cost_per_mtok_input=5.0, cost_per_mtok_output=15.0),
        provider("groq-x", max_concurrency=3, cost_per_mtok_input=0.3, cost_per_mtok_output=0.9),
        routes={
            "chat": ["cerebras-x", "groq-x", "openai-x"],
            "code": ["groq-x", "openai-x"],
            "cheap": ["cerebras-x", "groq-x"],
        },
    )
    return Policy(config, params())


@pytest.fixture(scope="module")
def pool() -> Iterator[FoldPool]:
    with FoldPool(2) as workers:
        workers.start()
        yield workers


@pytest.fixture(scope="module")
def recorded() -> RecordedLog:
    return synthetic_log(routes(), PROFILES, 450)


def assert_same(serial: ReplayReport, parallel: ReplayReport) -> None:
    everything = 10**6
    assert json.dumps(parallel.to_json(everything), sort_keys=True) == json.dumps(
        serial.to_json(everything), sort_keys=True
    )
    assert parallel.mismatches == serial.mismatches  # origins and pending too, in order
    assert parallel.states == serial.states
    assert list(parallel.states) == list(serial.states)
    assert render(parallel, show=everything) == render(serial, show=everything)


def with_routing(log: RecordedLog, routing: list[Entry[Any]], **streams: Any) -> RecordedLog:
    return RecordedLog(
        log.source,
        routing,
        streams.get("decisions", log.decisions),
        log.outcomes,
        streams.get("responses", log.responses),
        log.feedback,
        dict(log.routing_start),
    )


def slower(log: RecordedLog, index: int, factor: float) -> Entry[Any]:
    """Routing entry ``index`` (an AttemptFinished) with its latency times ``factor``."""
    entry = log.routing[index]
    event = entry.event
    assert isinstance(event, AttemptFinished)
    changed = event.outcome.model_copy(update={"latency_ms": event.outcome.latency_ms * factor})
    raw = event.model_copy(update={"outcome": changed}).model_dump_json()
    return parse("routing", entry.partition, entry.offset, raw)


def finishes(log: RecordedLog, route: str) -> list[int]:
    return [
        i
        for i, e in enumerate(log.routing)
        if isinstance(e.event, AttemptFinished) and e.event.outcome.route == route
    ]


def test_several_routes_replay_the_same_in_workers(recorded: RecordedLog, pool: FoldPool) -> None:
    assert len(plan(route_keys(recorded.routing), pool.jobs)) == 2
    serial = replay(recorded, routes())
    parallel = replay(recorded, routes(), pool=pool)
    assert serial.ok and serial.reproduced == serial.recorded > 450
    assert len(serial.states) == 3
    assert_same(serial, parallel)


def test_one_worker_folds_every_route_alike(recorded: RecordedLog) -> None:
    with FoldPool(1) as one:
        assert_same(replay(recorded, routes()), replay(recorded, routes(), pool=one))


def test_a_tampered_log_fails_the_same_way_with_the_same_mismatches(
    recorded: RecordedLog, pool: FoldPool
) -> None:
    routing = list(recorded.routing)
    for route in ("code", "chat", "cheap"):  # in every group, not in log order
        index = finishes(recorded, route)[40]
        routing[index] = slower(recorded, index, 9.0)
    decisions = list(recorded.decisions)
    dropped = decisions.pop(30)  # recorded nowhere: re-derived but not recorded
    forged = decisions[10].event
    assert forged is not None and dropped.event is not None
    forged = forged.model_copy(update={"id": derived_id("forged", 1)})
    decisions.insert(11, Entry(0, 10_000, forged.model_dump_json(), forged))  # not re-derived
    decisions.append(decisions[5])  # an identical redelivery counts once
    responses = list(recorded.responses)
    for index in (7, 200):
        answer = responses[index].event
        assert answer is not None
        other = answer.model_copy(update={"attempts": answer.attempts + 1})
        responses[index] = Entry(0, index, other.model_dump_json(), other)
    del responses[100]
    log = with_routing(recorded, routing, decisions=decisions, responses=responses)
    serial = replay(log, routes())
    kinds = {(m.kind, m.record) for m in serial.mismatches}
    assert {("differs", "decision"), ("not_rederived", "decision")} <= kinds
    assert {("not_recorded", "decision"), ("differs", "response")} <= kinds
    assert len(serial.mismatches) > 20 and not serial.ok
    assert_same(serial, replay(log, routes(), pool=pool))


def test_outputs_not_published_yet_are_pending_alike(recorded: RecordedLog, pool: FoldPool) -> None:
    again = rederive(recorded.routing, routes())
    made = [
        *zip(again.decisions, again.decision_origins, strict=True),
        *zip(again.responses, again.response_origins, strict=True),
    ]
    # Each partition's router stopped 10 events before the end of its partition.
    ends: dict[int, int] = {}
    for entry in recorded.routing:
        ends[entry.partition] = entry.offset
    late = {r.id for r, (partition, offset) in made if offset > ends[partition] - 10}
    decisions = [e for e in recorded.decisions if e.event and e.event.id not in late]
    responses = [e for e in recorded.responses if e.event and e.event.id not in late]
    log = with_routing(recorded, list(recorded.routing), decisions=decisions, responses=responses)
    for allow_pending in (False, True):
        serial = replay(log, routes(), allow_pending=allow_pending)
        assert serial.pending == len(serial.mismatches) > 0
        assert_same(serial, replay(log, routes(), allow_pending=allow_pending, pool=pool))


def test_records_whose_fold_raises_are_reported_alike(
    recorded: RecordedLog, pool: FoldPool
) -> None:
    """A budget ask whose index is past its scopes names no key: its fold raises, and the
    router dead-letters it; replay reports it, in log order, wherever it is folded."""
    routing = list(recorded.routing)
    ends: dict[int, int] = {}
    for entry in routing:
        ends[entry.partition] = entry.offset
    for partition in sorted(ends, reverse=True):
        for n in range(2):
            bad = BudgetAsk(
                id=derived_id("bad ask", partition, n),
                occurred_at=at(T0 + 5),
                route="chat",
                request_id=f"bad-{partition}-{n}",
                attempt=1,
                amount_usd=0.01,
                scopes=["route:chat"],
                index=3,
                deadline=T0 + 60,
            )
            offset = ends[partition] + 1 + n
            routing.append(parse("routing", partition, offset, bad.model_dump_json()))
    log = with_routing(recorded, sorted(routing, key=lambda e: (e.partition, e.offset)))
    serial = replay(log, routes())
    assert len(serial.fold_errors) == 6 and not serial.ok
    assert serial.fold_errors[0].startswith("partition 0 offset ")
    assert_same(serial, replay(log, routes(), pool=pool))


def test_the_merge_puts_every_record_back_in_log_order(
    recorded: RecordedLog, pool: FoldPool
) -> None:
    """Sorting by the index the workers send back is the serial order (a merge that
    appended the chunks one after the other would not be)."""
    serial = rederive(recorded.routing, routes())
    book = policy_book(recorded.routing)
    parallel = rederive_parallel(recorded.routing, routes(), book, pool)
    assert [(d.id, o) for d, o in zip(serial.decisions, serial.decision_origins, strict=True)] == [
        (record_id, origin) for _, record_id, _, origin in parallel.decisions
    ]
    assert [(r.id, o) for r, o in zip(serial.responses, serial.response_origins, strict=True)] == [
        (record_id, origin) for _, record_id, _, origin in parallel.responses
    ]
    assert [d.model_dump_json() for d in serial.decisions] == [
        text for _, _, text, _ in parallel.decisions
    ]
    assert list(parallel.states) == list(serial.states) and parallel.states == serial.states
    assert (parallel.events, parallel.applied, parallel.skipped) == (
        serial.events,
        serial.applied,
        serial.skipped,
    )
    # Three routes in two chunks: one chunk holds two routes, interleaved in the log.
    assert sorted(map(len, plan(route_keys(recorded.routing), pool.jobs))) == [1, 2]


def test_merge_interleaves_the_workers_results_by_index() -> None:
    state = RouteState()
    first = Folded(
        decisions=[(1, "d1", "{}", (0, 1)), (4, "d4a", "{}", (0, 4)), (4, "d4b", "{}", (0, 4))],
        responses=[(4, "r4", "{}", (0, 4))],
        states={"b": state, "a": state},
        stored_at={"b": 1, "a": 6},
        errors=[(7, "seven")],
        events=3,
    )
    second = Folded(
        decisions=[(0, "d0", "{}", (1, 0)), (5, "d5", "{}", (1, 5))],
        responses=[(2, "r2", "{}", (1, 2)), (5, "r5", "{}", (1, 5))],
        states={"c": state},
        stored_at={"c": 0},
        errors=[(3, "three")],
        events=4,
    )
    merged = merge([first, second])
    assert [d[1] for d in merged.decisions] == ["d0", "d1", "d4a", "d4b", "d5"]
    assert [r[1] for r in merged.responses] == ["r2", "r4", "r5"]
    assert list(merged.states) == ["c", "b", "a"]
    assert merged.errors == ["three", "seven"] and merged.events == 7


def document(*provider_ids: str) -> PolicyDocument:
    ids = list(provider_ids)
    config = routing_config(*(provider(p) for p in ids), routes={"chat": ids, "other": ids})
    view = config.model_dump(mode="json", exclude={"gateway_keys": True})
    return PolicyDocument(config=view, params=params_document(params()))


def test_a_route_without_a_policy_change_folds_with_the_logs_first_version(
    pool: FoldPool,
) -> None:
    """The book crosses routes: ``other`` never folds a ``policy.changed``, so it folds
    with the log's first version, whose record is on ``chat``'s partition."""
    alpha, beta = dep("alpha"), dep("beta")
    doc = document("alpha", "beta")
    change = PolicyChanged(
        id=derived_id("policy.changed", 1, "chat"),
        occurred_at=at(T0),
        route="chat",
        version=1,
        hash=document_hash(doc),
        document=doc,
        source="apply",
    )
    # chat on partition 1 with its change; other on partition 0, which has none.
    events: list[tuple[int, RoutingLogEvent]] = [(1, change)]
    for n in range(24):
        route = "chat" if n % 2 else "other"
        request_id = f"r{n}"
        events.append((n % 2, accepted(request_id, T0 + n, route=route)))
        done = outcome(request_id, alpha if n % 3 else beta, T0 + n + 0.5, route=route)
        events.append((n % 2, finished(done)))
    book = PolicyBook()
    book.add(1, doc, change.hash)
    unrelated = Policy(routing_config(provider("gamma")), params())
    driver = Driver(lambda: unrelated, book=book)
    log = RecordedLog("test")
    offsets = [0, 0]
    for partition, event in events:
        offset = offsets[partition]
        offsets[partition] += 1
        step = driver.fold(event, offset)
        log.routing.append(parse("routing", partition, offset, event.model_dump_json()))
        for dispatch in step.dispatches:
            raw = dispatch.decision.model_dump_json()
            log.decisions.append(parse("decisions", 0, len(log.decisions), raw))
        for response in step.responses:
            log.responses.append(
                parse("responses", 0, len(log.responses), response.model_dump_json())
            )
    log.sort()
    serial = replay(log, unrelated)
    assert serial.ok and serial.reproduced == 24 and serial.policy_versions.keys() == {1}
    assert {d.event.deployment for d in log.decisions if d.event} == {alpha, beta}
    assert_same(serial, replay(log, unrelated, pool=pool))


def budgets_and_fallbacks() -> Policy:
    graph: dict[str, Any] = {
        "bind": [{"tenant": "acme"}],
        "start": "main",
        "nodes": {"main": {"kind": "model", "target": "cheap", "fallback_models": ["chat"]}},
    }
    config = RoutingConfig(
        providers=[
            provider(p, cost_per_mtok_input=1.0 + i, cost_per_mtok_output=4.0 + i)
            for i, p in enumerate("abc")
        ],
        routes={
            "chat": RouteConfig(providers=["a", "b"]),
            "cheap": RouteConfig(providers=["c"]),
        },
        budgets=[Budget(scope="route", name="chat", usd_per_day=0.05)],
        dynamic_routes={"g": graph},  # type: ignore[arg-type]
    )
    return Policy(config, params(cost_weight=0.1))


def test_budget_ledgers_and_forwarded_requests_cross_routes_through_the_log_only(
    pool: FoldPool,
) -> None:
    profiles = {
        dep("a"): Profile(success=0.9, latency_ms=800.0, failure=StatusClass.SERVER_ERROR),
        dep("b"): Profile(success=0.95, latency_ms=600.0),
        dep("c"): Profile(success=0.99, latency_ms=500.0),
    }
    log = synthetic_log(budgets_and_fallbacks(), profiles, 300)
    keys = set(route_keys(log.routing))
    assert {"chat", "cheap"} < keys and any(k and k.startswith("budget:") for k in keys)
    serial = replay(log, budgets_and_fallbacks())
    assert serial.ok and serial.reproduced > 0
    assert_same(serial, replay(log, budgets_and_fallbacks(), pool=pool))


def test_a_log_of_one_route_is_folded_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    log = synthetic_log(Policy(routing_config(provider("cerebras-x")), params()), {}, 40)

    def no_pool(jobs: int) -> FoldPool:
        raise AssertionError("a log of one route needs no worker")

    monkeypatch.setattr("app.audit.replay.FoldPool", no_pool)
    report = replay(log, Policy(routing_config(provider("cerebras-x")), params()), jobs=4)
    assert report.ok and report.reproduced == report.recorded >= 40


def test_a_worker_imports_the_fold_and_no_broker_client() -> None:
    code = "import app.audit.replay_worker, json, sys; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    loaded = set(json.loads(out.stdout))
    assert "app.routing.driver" in loaded
    assert not {m for m in loaded if m.split(".")[0] in {"aiokafka", "faust", "agents"}}
    assert not loaded & {"app.audit.log", "app.audit.replay", "app.cli", "app.kafka"}


def test_replay_with_jobs_stops_every_worker_it_starts(recorded: RecordedLog) -> None:
    before = {p.pid for p in multiprocessing.active_children()}
    serial = replay(recorded, routes())
    assert_same(serial, replay(recorded, routes(), jobs=3))  # a worker per route
    assert {p.pid for p in multiprocessing.active_children()} <= before


def test_cli_jobs(
    recorded: RecordedLog,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routing = list(recorded.routing)
    for route in ("cheap", "chat"):
        index = finishes(recorded, route)[20]
        routing[index] = slower(recorded, index, 5.0)
    write_export(with_routing(recorded, routing), tmp_path, Topics())
    write_policy(routes(), tmp_path)
    args = ["replay", "--from-export", str(tmp_path), "--json", "--show", "1000"]
    outputs = []
    for jobs in ("1", "2"):
        assert main([*args, "--jobs", jobs]) == 1
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[1])["mismatched"] > 5
    assert main(["replay", "--from-export", str(tmp_path), "--jobs", "0"]) == 2
    assert "--jobs 0" in capsys.readouterr().err

    # Unset: workers for a long log only (starting them costs more than a short one).
    started: list[int] = []

    class Counted(FoldPool):
        def __init__(self, jobs: int) -> None:
            started.append(jobs)
            super().__init__(jobs)

    monkeypatch.setattr("app.audit.replay_parallel.FoldPool", Counted)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert main(args) == 1
    assert capsys.readouterr().out == outputs[0] and started == []
    monkeypatch.setattr("app.audit.commands.PARALLEL_FROM", len(recorded.routing))
    assert main(args) == 1
    assert capsys.readouterr().out == outputs[0] and started == [2]
