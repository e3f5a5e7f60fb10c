"""A decision's fields reach the analytics store and the trace from the model alone
(app/audit/decision_fields.py); a store made before a column existed gains it. No broker."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import duckdb
import orjson

from app.analytics.rows import Position, Skip, decision_row, rows_of
from app.analytics.schema import DECISIONS, create_statements
from app.analytics.store import SourceRecord, Store
from app.audit.decision_fields import COLUMNS, CONTEXT, SHOWN, context_of, scalar_type
from app.audit.explain import build_trace
from app.contract import Decision
from bench.logs.sample import sample_log

#: Columns the store fills itself, not from the decision.
STORE_KEPT = {"previous_state_version", "kafka_topic", "kafka_partition", "kafka_offset"}


def a_decision() -> Decision:
    decision = next(e.event for e in sample_log(30).decisions if e.event)
    assert isinstance(decision, Decision)
    return decision.model_copy(update={"affinity": "session", "context_depth": 2})


def test_every_decision_field_is_shown_or_context_and_every_scalar_a_column() -> None:
    fields = Decision.model_fields
    assert set(CONTEXT) == set(fields) - SHOWN and set(fields) >= SHOWN
    types = {c.name: c.type for c in DECISIONS.columns}
    for name, info in fields.items():
        if scalar_type(info.annotation) is not None and name not in ("type", "schema_version"):
            assert name in COLUMNS and name in types, name
    assert types["state_version"] == "BIGINT" and types["affinity"] == "VARCHAR"
    assert {"dynamic", "auto", "candidates", "excluded"}.isdisjoint(COLUMNS)


def test_a_row_holds_every_column_and_the_trace_context_as_details() -> None:
    decision = a_decision()
    row = decision_row(decision)
    assert set(row) == set(DECISIONS.names) - STORE_KEPT
    assert row["affinity"] == "session" and row["context_depth"] == 2
    assert row["occurred_at"] == decision.occurred_at
    dumped = decision.model_dump(mode="json")
    assert json.loads(row["details"]) == {k: v for k, v in dumped.items() if k not in SHOWN}
    assert list(json.loads(row["details"])) == list(CONTEXT)
    assert context_of(decision)["affinity"] == "session"


def test_the_trace_lists_the_context_fields() -> None:
    log = sample_log(30)
    decision = next(e.event for e in log.decisions if e.event)
    assert isinstance(decision, Decision)
    trace = build_trace(log, decision.request_id)
    assert trace is not None
    (shown,) = [a["decision"] for a in trace["attempts"] if a["attempt"] == decision.attempt]
    assert shown["decision_id"] == decision.id
    assert list(shown["context"]) == list(CONTEXT)


def test_a_store_made_before_a_decision_column_gains_it(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    older = replace(DECISIONS, columns=tuple(c for c in DECISIONS.columns if c.name != "affinity"))
    con = duckdb.connect(str(path))
    for statement in create_statements(older):
        con.execute(statement)
    con.close()
    store = Store(path)
    columns = [name for (name,) in store.query(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'decisions'"
    )]  # fmt: skip
    assert "affinity" in columns
    decision = a_decision()
    raw = orjson.dumps(decision.model_dump(mode="json"))
    assert not isinstance(rows_of("decisions", raw, Position("llm.decisions", 0, 0)), Skip)
    store.apply([SourceRecord("decisions", "llm.decisions", 0, 0, raw)])
    found = store.query("SELECT affinity, context_depth FROM decisions WHERE id = ?", [decision.id])
    assert found == [("session", 2)]
    store.close()
