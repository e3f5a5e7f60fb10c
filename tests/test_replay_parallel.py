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
from factories import (
    T0,
    accepted,
    budgeted_fallbacks,
    dep,
    finished,
    outcome,
    params,
    provider,
    routing_config,
)

from app.audit.export import write_export, write_policy
from app.audit.log import Entry, RecordedLog, parse, read_export
from app.audit.log_texts import LogTexts, read_export_texts, texts_of
from app.audit.record_keys import guess_key
from app.audit.replay import FoldPool, ReplayReport, rederive, render, replay
from app.audit.replay_parallel import plan
from app.audit.routing_scan import scan_entries, scan_export
from app.cli import main
from app.contract import (
    AttemptFinished,
    BudgetAsk,
    Feedback,
    GradeApplied,
    RequestAccepted,
    RoutingLogEvent,
    StatusClass,
    derived_id,
    route_of,
)
from app.contract.policy import PolicyChanged, PolicyDocument
from app.grades.matching import grade_id
from app.routing.answers import at
from app.routing.book import PolicyBook, document_hash, params_document
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.settings import Topics
from bench.logs.synthetic import Profile, synthetic_log

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
    assert list(parallel.recorded_config_hashes.items()) == list(
        serial.recorded_config_hashes.items()
    )
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


def tampered(recorded: RecordedLog) -> RecordedLog:
    """Slower outcomes on every route; a decision dropped, one forged, one sent twice;
    two responses altered and one dropped."""
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
    return with_routing(recorded, routing, decisions=decisions, responses=responses)


def test_several_routes_replay_the_same_in_workers(recorded: RecordedLog, pool: FoldPool) -> None:
    assert len(plan(scan_entries(recorded).keys, pool.jobs)) == 2
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
    log = tampered(recorded)
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


def test_budget_ledgers_and_forwarded_requests_cross_routes_through_the_log_only(
    pool: FoldPool,
) -> None:
    profiles = {
        dep("a"): Profile(success=0.9, latency_ms=800.0, failure=StatusClass.SERVER_ERROR),
        dep("b"): Profile(success=0.95, latency_ms=600.0),
        dep("c"): Profile(success=0.99, latency_ms=500.0),
    }
    log = synthetic_log(budgeted_fallbacks(), profiles, 300)
    keys = set(scan_entries(log).keys)
    assert {"chat", "cheap"} < keys and any(k and k.startswith("budget:") for k in keys)
    serial = replay(log, budgeted_fallbacks())
    assert serial.ok and serial.reproduced > 0
    assert_same(serial, replay(log, budgeted_fallbacks(), pool=pool))


def test_a_log_of_one_route_is_folded_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    log = synthetic_log(Policy(routing_config(provider("cerebras-x")), params()), {}, 40)

    def no_pool(jobs: int) -> FoldPool:
        raise AssertionError("a log of one route needs no worker")

    monkeypatch.setattr("app.audit.replay_parallel.FoldPool", no_pool)
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


# --------------------------------------------------------------------------- texts


def unreadable_lines(directory: Path) -> None:
    """An unreadable record in each stream of an export, as a broken writer leaves them."""
    with (directory / "routing.jsonl").open("a", encoding="utf-8") as routing:
        routing.write('{"partition":0,"offset":99998,"event":null}\n')
        routing.write('{"partition":1,"offset":99999,"event":{"id":"x","type":"route.tick"}}\n')
    for stream in ("decisions", "responses"):
        path = directory / f"{stream}.jsonl"
        lines = path.read_text(encoding="utf-8").split("\n")
        lines.insert(3, lines[3][: len(lines[3]) // 2])  # a copy cut short: its id, no more
        lines.insert(8, '{"not": "a record"}')
        path.write_text("\n".join(lines), encoding="utf-8")


def test_an_export_is_replayed_by_workers_that_read_it_themselves(
    recorded: RecordedLog, pool: FoldPool, tmp_path: Path
) -> None:
    write_export(tampered(recorded), tmp_path, Topics())
    unreadable_lines(tmp_path)
    serial = replay(read_export(tmp_path), routes())
    assert serial.mismatched > 5 and serial.count("not_rederived") == 1
    assert set(serial.unreadable) == {"routing", "decisions", "responses"}
    texts = read_export_texts(tmp_path)
    assert_same(serial, replay(texts, routes(), pool=pool))
    assert texts.original is None  # read where it is: nothing parsed in this process
    assert pool.last is not None and not pool.last.fell_back


def test_an_export_laid_out_otherwise_replays_the_same(
    recorded: RecordedLog, pool: FoldPool, tmp_path: Path
) -> None:
    """Lines ending in CR LF (another tool rewrote it): read parsed, folded in workers."""
    write_export(tampered(recorded), tmp_path, Topics())
    for name in ("routing", "decisions", "responses"):
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    serial = replay(read_export(tmp_path), routes())
    assert_same(serial, replay(read_export_texts(tmp_path), routes(), pool=pool))


def test_texts_from_a_broker_give_their_keys_and_replay_the_same(
    recorded: RecordedLog, pool: FoldPool
) -> None:
    texts = texts_of(tampered(recorded))
    log = texts.parsed()
    texts.original = None  # as read from a broker: the keys come from the texts
    assert_same(replay(log, routes()), replay(texts, routes(), pool=pool))
    assert pool.last is not None and not pool.last.fell_back


def test_the_key_read_from_a_text_is_the_events_key(recorded: RecordedLog) -> None:
    budgets = synthetic_log(budgeted_fallbacks(), {}, 120)
    read = 0
    for entry in [*recorded.routing, *budgets.routing]:
        assert entry.event is not None
        text = entry.raw.encode()
        key = guess_key(text, 0, len(text))
        if key is not None:
            read += 1
            assert key == route_of(entry.event)
    assert read == len(recorded.routing) + len(budgets.routing)


def test_the_export_scan_finds_every_record_and_its_key(
    recorded: RecordedLog, tmp_path: Path
) -> None:
    write_export(recorded, tmp_path, Topics())
    scan = scan_export(tmp_path / "routing.jsonl")
    assert scan is not None and scan.keys == scan_entries(recorded).keys
    data = (tmp_path / "routing.jsonl").read_bytes()
    texts = [data[a:b].decode() for a, b in zip(scan.starts, scan.ends, strict=True)]
    assert texts == [entry.raw for entry in recorded.routing]
    assert (scan.partitions, scan.offsets) == (
        [e.partition for e in recorded.routing],
        [e.offset for e in recorded.routing],
    )


def two_chunks(log: RecordedLog) -> tuple[str, str]:
    """A route of each chunk of a two-worker replay."""
    planned = plan(scan_entries(log).keys, 2)
    return planned[0][0], planned[1][0]


def test_a_text_that_names_another_key_is_replayed_in_one_process(
    recorded: RecordedLog, pool: FoldPool
) -> None:
    """An attempt whose text names another route first (a duplicated field: the last one
    counts): its worker finds it is not one of its keys, and the parent replays the
    log in one process, for the same report."""
    first, second = two_chunks(recorded)
    routing = list(recorded.routing)
    index = finishes(recorded, first)[10]
    entry = routing[index]
    real = f',"route":"{first}"'
    raw = entry.raw.replace(real, f',"route":"{second}"{real}', 1)
    routing[index] = parse("routing", entry.partition, entry.offset, raw)
    log = with_routing(recorded, routing)
    text = raw.encode()
    assert guess_key(text, 0, len(text)) == second != route_of(routing[index].event)  # type: ignore[arg-type]
    serial = replay(log, routes())
    assert_same(serial, replay(texts_unparsed(log), routes(), pool=pool))
    assert pool.last is not None and pool.last.fell_back


def texts_unparsed(log: RecordedLog) -> LogTexts:
    texts = texts_of(log)
    texts.original = None
    return texts


def test_a_recorded_text_whose_id_is_another_is_replayed_in_one_process(
    recorded: RecordedLog, pool: FoldPool
) -> None:
    """A decision whose text starts with the id of a decision another worker makes."""
    first, second = two_chunks(recorded)
    decisions = list(recorded.decisions)
    of = {
        route: next(
            n for n, e in enumerate(decisions) if e.event is not None and e.event.route == route
        )
        for route in (first, second)
    }
    other, real = decisions[of[first]].event, decisions[of[second]]
    assert other is not None
    raw = '{"id":"' + other.id + '",' + real.raw[1:]
    decisions[of[second]] = parse("decisions", real.partition, real.offset, raw)
    log = with_routing(recorded, list(recorded.routing), decisions=decisions)
    serial = replay(log, routes())
    assert_same(serial, replay(texts_unparsed(log), routes(), pool=pool))
    assert pool.last is not None and pool.last.fell_back


def test_one_id_re_derived_by_two_workers_is_replayed_in_one_process(
    recorded: RecordedLog, pool: FoldPool
) -> None:
    """A request accepted on two routes in two chunks: both re-derive its decision and
    its response, under the same ids."""
    first, second = two_chunks(recorded)
    routing = list(recorded.routing)
    copied = next(
        e.event for e in routing if isinstance(e.event, RequestAccepted) and e.event.route == first
    )
    assert copied is not None
    source = copied.source.model_copy(update={"offset": 10**6})
    moved = copied.model_copy(
        update={"route": second, "id": derived_id("accepted again"), "source": source}
    )
    where = next(e for e in routing if e.event is not None and route_of(e.event) == second)
    ends = max(e.offset for e in routing if e.partition == where.partition)
    routing.append(parse("routing", where.partition, ends + 1, moved.model_dump_json()))
    log = with_routing(recorded, sorted(routing, key=lambda e: (e.partition, e.offset)))
    serial = replay(log, routes())
    assert not serial.ok
    assert_same(serial, replay(log, routes(), pool=pool))
    assert pool.last is not None and pool.last.fell_back


def graded(log: RecordedLog) -> RecordedLog:
    """Grades on every route (each with its feedback), one of them altered, one of a
    request answered on another route; appended to their routes' partitions."""
    answered = [
        e.event.outcome
        for e in log.routing
        if isinstance(e.event, AttemptFinished)
        and e.event.outcome.final
        and e.event.outcome.status_class is StatusClass.SUCCESS
    ]
    chosen = [next(o for o in answered if o.route == r) for r in ("chat", "code", "cheap")]
    chosen += [o for o in answered if o.route == "chat"][5:8]
    ends: dict[int, int] = {}
    partition_of: dict[str, int] = {}
    for entry in log.routing:
        ends[entry.partition] = max(ends.get(entry.partition, -1), entry.offset)
        if entry.event is not None:
            partition_of[route_of(entry.event)] = entry.partition
    routing, feedback = list(log.routing), list(log.feedback)
    for n, answer in enumerate(chosen):
        item = Feedback.model_validate(
            {"request_id": answer.request_id, "source": "user", "score": 0.8}
        ).with_id()
        feedback.append(parse("feedback", 0, n, item.model_dump_json()))
        route = "code" if n == 4 else answer.route  # graded on a route it was not answered on
        grade = GradeApplied(
            id=grade_id(answer.request_id, str(item.feedback_id)),
            occurred_at=at(T0 + 10_000),
            request_id=answer.request_id,
            route=route,
            deployment=answer.deployment,
            source="user",
            score=0.3 if n == 2 else 0.8,
            feedback_id=str(item.feedback_id),
        )
        partition = partition_of[route]
        ends[partition] += 1
        routing.append(parse("routing", partition, ends[partition], grade.model_dump_json()))
    graded_log = with_routing(log, sorted(routing, key=lambda e: (e.partition, e.offset)))
    graded_log.feedback = feedback
    return graded_log


def test_grades_are_checked_alike(recorded: RecordedLog, pool: FoldPool) -> None:
    log = graded(recorded)
    serial = replay(log, routes())
    assert serial.grades.recorded == 6 and 0 < serial.grades.verified < 6
    assert_same(serial, replay(log, routes(), pool=pool))
    assert_same(serial, replay(texts_unparsed(log), routes(), pool=pool))
    assert pool.last is not None and not pool.last.fell_back


def test_cli_jobs_on_a_tampered_export_with_unreadable_records(
    recorded: RecordedLog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_export(tampered(recorded), tmp_path, Topics())
    write_policy(routes(), tmp_path)
    unreadable_lines(tmp_path)
    outputs = []
    for jobs in ("1", "2"):
        for form in ([], ["--json", "--show", "1000"]):
            assert main(["replay", "--from-export", str(tmp_path), *form, "--jobs", jobs]) == 1
            outputs.append(capsys.readouterr().out)
    assert outputs[:2] == outputs[2:]
    assert json.loads(outputs[3])["mismatched"] > 5


def test_cli_jobs_on_an_export_that_is_not_utf8(
    recorded: RecordedLog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_export(recorded, tmp_path, Topics())
    write_policy(routes(), tmp_path)
    path = tmp_path / "decisions.jsonl"
    data = path.read_bytes()
    at_hash = data.index(b'"prompt_sha256":"', data.index(b"\n", 5000)) + 20
    path.write_bytes(data[:at_hash] + b"\xff" + data[at_hash + 1 :])
    for jobs in ("1", "2"):
        assert main(["replay", "--from-export", str(tmp_path), "--jobs", jobs]) == 2
        assert "cannot read the recorded log" in capsys.readouterr().err


def test_texts_laid_out_otherwise_replay_the_same(recorded: RecordedLog, pool: FoldPool) -> None:
    """Records written by another tool (indented, over several lines): their keys and
    ids are parsed, not read from where the router's JSON puts them."""
    log = tampered(recorded)

    def indented(entries: list[Entry[Any]], stream: str, index: int) -> list[Entry[Any]]:
        entries = list(entries)
        entry = entries[index]
        raw = json.dumps(json.loads(entry.raw), indent=1)
        entries[index] = parse(stream, entry.partition, entry.offset, raw)
        return entries

    routing = indented(log.routing, "routing", 5)
    other = with_routing(
        log,
        routing,
        decisions=indented(log.decisions, "decisions", 3),
        responses=indented(log.responses, "responses", 4),
    )
    text = routing[5].raw.encode()
    assert guess_key(text, 0, len(text)) is None
    serial = replay(other, routes())
    assert serial.mismatched > 5
    assert_same(serial, replay(other, routes(), pool=pool))
    assert_same(serial, replay(texts_unparsed(other), routes(), pool=pool))
    assert pool.last is not None and not pool.last.fell_back
