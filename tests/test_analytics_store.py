"""The analytics store: one row per event through redeliveries and a crash, traces equal to
the audit's, views, no content, Parquet export, documented columns. No broker."""

from __future__ import annotations

import json
import random
import re
import zlib
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from app.analytics.load import fold_log, log_records
from app.analytics.parquet import write_parquet_export
from app.analytics.schema import EVENT_TABLES, TABLES
from app.analytics.store import SourceRecord, Store
from app.analytics.trace import store_trace
from app.analytics.views import VIEWS
from app.audit.explain import build_trace
from app.audit.export import write_export
from app.audit.log import RecordedLog
from app.cli import main
from app.contract import AttemptFinished, GradeApplied, RequestAccepted
from app.grades.matching import grade_id
from app.settings import Topics
from bench.logs.sample import sample_log

TOPICS = Topics()
DOCS = Path(__file__).resolve().parent.parent / "docs" / "analytics.md"


@pytest.fixture(scope="module")
def log() -> RecordedLog:
    return sample_log(2000, policy_every=700)


@pytest.fixture(scope="module")
def store(log: RecordedLog) -> Store:
    folded = Store()
    fold_log(folded, log, TOPICS)
    return folded


def distinct_events(log: RecordedLog) -> dict[str, int]:
    """Distinct event ids per table, counted from the log itself (not by a store)."""
    ids: dict[str, set[str]] = {t.name: set() for t in EVENT_TABLES}
    for entry in log.routing:
        event = entry.event
        if isinstance(event, RequestAccepted):
            ids["requests"].add(event.id)
        elif isinstance(event, AttemptFinished):
            ids["outcomes"].add(event.outcome.id)
        elif isinstance(event, GradeApplied):
            ids["grades"].add(event.id)
        elif '"type":"policy.changed"' in entry.raw:
            ids["policy_changes"].add(json.loads(entry.raw)["id"])
    for name in ("decisions", "outcomes", "responses"):
        ids[name] |= {e.event.id for e in log.stream(name) if e.event}
    ids["feedback"] = {grade_id(e.event.request_id, str(e.event.feedback_id))
                       for e in log.feedback if e.event}  # fmt: skip
    return {name: len(found) for name, found in ids.items()}


def event_counts(store: Store) -> dict[str, int]:
    return {t.name: store.counts()[t.name] for t in EVENT_TABLES}


def test_ten_thousand_events_redelivered_and_a_crash_leave_one_row_per_event(
    log: RecordedLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = list(log_records(log, TOPICS))
    assert len(records) >= 10_000
    rng = random.Random(15)
    # A producer re-sends ~8 % of the events: the same bytes (same id) at a new offset.
    resent: list[SourceRecord] = []
    next_offset = Counter[tuple[str, int]]()
    for r in records:
        next_offset[(r.topic, r.partition)] = max(next_offset[(r.topic, r.partition)], r.offset + 1)
    for r in rng.sample(records, 800):
        where = (r.topic, r.partition)
        resent.append(SourceRecord(r.stream, r.topic, r.partition, next_offset[where], r.value))
        next_offset[where] += 1
    stream = records + resent
    want = distinct_events(log)
    assert all(want.values()) and sum(want.values()) > 8000

    path = tmp_path / "analytics.duckdb"
    first = Store(path)
    batches = [stream[i : i + 700] for i in range(0, len(stream), 700)]
    crash_at = len(batches) // 2
    for batch in batches[:crash_at]:
        first.apply(batch)
        if rng.random() < 0.3:  # the consumer sees a batch again (a rebalance, a retry)
            assert first.apply(batch).folded == 0
    # The process dies in the middle of a transaction: rows inserted, offsets not yet.
    committed = first.offsets()
    before = event_counts(first)

    def crash(*_: object) -> None:
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(Store, "_insert_offsets", staticmethod(crash))
    with pytest.raises(KeyboardInterrupt):
        first.apply(batches[crash_at])
    monkeypatch.undo()
    assert first.offsets() == committed and event_counts(first) == before  # rolled back
    first.close()

    # Restart: read from the committed offsets, which re-reads the lost batch.
    second = Store(path)
    resume = second.offsets()
    assert resume == committed
    rest = [r for r in stream if r.offset >= resume.get((r.topic, r.partition), 0)]
    assert len(rest) > len(stream) // 3
    rest.sort(key=lambda r: (r.partition, r.offset, r.topic))  # partitions interleaved
    for i in range(0, len(rest), 500):
        second.apply(rest[i : i + 500])
    assert event_counts(second) == want
    for table in EVENT_TABLES:
        duplicates = second.query(f"SELECT count(*) - count(DISTINCT id) FROM {table.name}")[0][0]
        assert duplicates == 0, table.name
    assert second.offsets() == dict(next_offset)
    assert second.counts()["skipped_records"] == 0


def test_the_trace_matches_the_audit_for_random_requests(log: RecordedLog, store: Store) -> None:
    ids = sorted({e.event.request_id for e in log.responses if e.event})
    chosen = random.Random(7).sample(ids, 100)
    graded = [e.event.request_id for e in log.routing if type(e.event).__name__ == "GradeApplied"]
    for request_id in chosen + graded[:20]:
        assert store_trace(store, request_id) == build_trace(log, request_id), request_id
    fallbacks = [t for t in map(lambda r: store_trace(store, r), chosen) if len(t["attempts"]) > 1]
    assert fallbacks, "the sample has retried requests"
    moved = [
        a for r in graded[:20] for a in store_trace(store, r)["attempts"]
        if a["decision"]["grades_before"]["count"]
    ]  # fmt: skip
    assert moved, "some decision was moved by grades"
    assert store_trace(store, "no-such-request") is None

    # Partitions read in any order: decisions arrive out of state-version order, and the
    # store still links each to the route's previous decision.
    spread: dict[tuple[str, int], list[SourceRecord]] = {}
    for r in log_records(log, TOPICS):
        partition = r.partition
        if r.stream in ("decisions", "outcomes", "responses"):
            partition = zlib.crc32(json.loads(r.value)["request_id"].encode()) % 4
        where = (r.topic, partition)
        spread.setdefault(where, []).append(
            SourceRecord(r.stream, r.topic, partition, len(spread.get(where, [])), r.value)
        )
    shuffled = Store()
    for where in sorted(spread, key=lambda w: (w[0] != TOPICS.decisions, -w[1])):
        batch = spread[where]  # decisions' partition 3 first, then 2, 1, 0, then the rest
        for i in range(0, len(batch), 997):
            shuffled.apply(batch[i : i + 997])
    for request_id in chosen[:30] + graded[:20]:
        assert store_trace(shuffled, request_id) == build_trace(log, request_id), request_id


def test_a_changed_outcome_changes_the_trace(log: RecordedLog, store: Store) -> None:
    """The comparison can fail: a store folded from an altered log differs."""
    request_id = next(e.event.request_id for e in log.outcomes if e.event)
    marker = f'"request_id":"{request_id}"'.encode()
    altered = [
        SourceRecord(r.stream, r.topic, r.partition, r.offset,
                     re.sub(rb'"latency_ms":[0-9.e+-]+', b'"latency_ms":1.5', r.value))
        if r.stream == "outcomes" and marker in r.value else r
        for r in log_records(log, TOPICS)
    ]  # fmt: skip
    other = Store()  # llm.outcomes first: its copy of each outcome is the one kept
    other.apply(sorted(altered, key=lambda r: r.stream == "routing"))
    changed, recorded = store_trace(other, request_id), build_trace(log, request_id)
    assert changed is not None and recorded is not None and changed != recorded
    assert changed["attempts"][0]["outcome"]["latency_ms"] == 1.5
    changed["attempts"][0]["outcome"]["latency_ms"] = recorded["attempts"][0]["outcome"][
        "latency_ms"
    ]
    assert changed == recorded


def test_views_add_up(store: Store) -> None:
    outcomes, cost = store.query("SELECT count(*), sum(cost_usd) FROM outcomes")[0]
    hourly = store.query("SELECT sum(requests), sum(cost_usd) FROM deployment_hourly")[0]
    assert hourly[0] == outcomes and hourly[1] == pytest.approx(cost)
    shares = store.query("SELECT hour, route, sum(share) FROM deployment_hourly GROUP BY ALL")
    assert shares and all(total == pytest.approx(1.0) for _, _, total in shares)
    rates = store.query("SELECT min(success_rate), max(success_rate) FROM deployment_hourly")[0]
    assert 0.0 <= rates[0] <= rates[1] <= 1.0
    spend = store.query("SELECT sum(cost_usd), count(DISTINCT tenant) FROM tenant_spend")[0]
    assert spend[0] == pytest.approx(cost) and spend[1] == 4  # three tenants and none
    log_rows, distinct = store.query(
        "SELECT count(*), count(DISTINCT request_id) FROM request_log"
    )[0]
    assert log_rows == distinct == 2000
    statuses = dict(store.query("SELECT status, count(*) FROM request_log GROUP BY 1"))
    assert statuses == dict(store.query("SELECT status, count(*) FROM responses GROUP BY 1"))
    states = {s for (s,) in store.query("SELECT DISTINCT state FROM breaker_observations")}
    assert {"closed", "open"} <= states
    assert store.counts()["policy_changes"] == 3


def test_no_prompt_or_completion_text_is_stored(store: Store) -> None:
    for table in TABLES.values():
        for column in table.columns:
            if column.type in ("VARCHAR", "JSON"):
                text = f"{column.name}::VARCHAR"
                hits = store.query(
                    f"SELECT count(*) FROM {table.name} WHERE {text} ILIKE '%synthetic prompt%' "
                    f"OR {text} ILIKE '%synthetic answer%'"
                )[0][0]
                assert hits == 0, (table.name, column.name)
    completions = store.query("SELECT min(completion_chars), max(choices) FROM responses")[0]
    assert completions == (len("synthetic answer"), 1)  # its length, not its text


def test_unreadable_records_are_skipped_with_a_reason_and_no_content(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    secret = b"SECRET-CONTENT"
    applied = store.apply(
        [
            SourceRecord("decisions", "llm.decisions", 0, 0, b"{not json " + secret),
            SourceRecord("responses", "llm.responses", 0, 0, b'{"type":"chat.response"}'),
            SourceRecord("routing", "switchyard.routing", 0, 0, b'{"type":"mystery"}'),
            SourceRecord("feedback", "llm.feedback", 0, 0, b'{"request_id":"r","source":"x"}'),
        ]
    )
    assert applied.skipped == 4
    reasons = dict(store.query("SELECT kafka_topic, reason FROM skipped_records"))
    assert reasons == {
        "llm.decisions": "not_json",
        "llm.responses": "invalid",
        "switchyard.routing": "unknown_type",
        "llm.feedback": "bad_feedback",
    }
    store.close()
    assert secret not in (tmp_path / "s.duckdb").read_bytes()


def test_parquet_export_writes_every_table(log: RecordedLog, store: Store, tmp_path: Path) -> None:
    counts = write_parquet_export(log, tmp_path / "parquet", TOPICS)
    assert counts == store.counts()
    for name in TABLES:
        table = pq.read_table(tmp_path / "parquet" / f"{name}.parquet")
        assert table.num_rows == counts[name]
        assert table.column_names == TABLES[name].names
    # The command: from an export, and from a store file.
    write_export(log, tmp_path / "export", TOPICS)
    out = tmp_path / "cli"
    assert main(["export", "--from-export", str(tmp_path / "export"), "--format", "parquet",
                 str(out)]) == 0  # fmt: skip
    assert pq.read_table(out / "decisions.parquet").num_rows == counts["decisions"]
    db = tmp_path / "store.duckdb"
    on_disk = Store(db)
    fold_log(on_disk, log, TOPICS)
    on_disk.close()
    assert main(["export", "--format", "parquet", "--store", str(db), str(tmp_path / "s")]) == 0
    assert pq.read_table(tmp_path / "s" / "outcomes.parquet").num_rows == counts["outcomes"]


def test_docs_name_every_table_view_and_column() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for table in TABLES.values():
        assert f"`{table.name}`" in text, table.name
        section = text.split(f"### `{table.name}`", 1)[1].split("\n### ", 1)[0]
        for column in table.columns:
            assert f"`{column.name}`" in section, (table.name, column.name)
    for view in VIEWS:
        assert f"`{view}`" in text, view
