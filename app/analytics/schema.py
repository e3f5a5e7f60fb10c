"""The analytics store's tables: every column, its type and what it means.

docs/analytics.md documents the same columns (a test checks that it names every one).
Each event table has one row per event id (``id``, the primary key): a redelivered
or duplicated event is the same id and changes nothing. ``kafka_topic``,
``kafka_partition`` and ``kafka_offset`` say where the sink first read the row's event.
No column holds prompt or completion text: a prompt's hash and length, a completion's
metadata (id, model, finish reason, token usage, length).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from app.audit.decision_fields import COLUMNS as DECISION_COLUMNS


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ("id",)
    #: Columns with a secondary index (point lookups by request id).
    indexed: tuple[str, ...] = ("request_id",)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]


def _c(name: str, kind: str, doc: str) -> Column:
    return Column(name, kind, doc)


ID = _c("id", "VARCHAR", "the event's id (deterministic: a duplicate has the same)")
AT = _c("occurred_at", "TIMESTAMPTZ", "when the event was published (UTC)")
REQUEST = _c("request_id", "VARCHAR", "the platform's request id")
POSITION = (
    _c("kafka_topic", "VARCHAR", "topic the event was first read from"),
    _c("kafka_partition", "INTEGER", "its partition"),
    _c("kafka_offset", "BIGINT", "its offset"),
)

REQUESTS = Table(
    "requests",
    "one row per accepted request (`request.accepted` on the routing log); never the messages",
    (
        ID,
        REQUEST,
        AT,
        _c("ingested_at", "TIMESTAMPTZ", "when ingest forwarded it"),
        _c("route", "VARCHAR", "the route it was accepted on"),
        _c("tenant", "VARCHAR", "the request's tenant (null: none)"),
        _c("model", "VARCHAR", "the `model` the platform asked for (route alias, pin)"),
        _c("pinned", "VARCHAR", "the deployment `model` pinned, if any"),
        _c("suffix", "VARCHAR", "`nitro` or `floor` when `model` carried one"),
        _c("mode", "VARCHAR", "the routing mode the request asked for"),
        _c("max_tokens", "INTEGER", "the request's `max_tokens`"),
        _c("messages", "INTEGER", "number of messages (never their content)"),
        _c("prompt_sha256", "VARCHAR", "SHA-256 of the prompt"),
        _c("prompt_chars", "INTEGER", "length of the prompt in characters"),
        _c("task_type", "VARCHAR", "detected task type (features)"),
        _c("length_bucket", "VARCHAR", "`short`, `medium`, `long` or `very_long`"),
        _c("has_code", "BOOLEAN", "the prompt contains code"),
        _c("features", "JSON", "every feature computed at ingest (labels and counts)"),
        _c("has_session", "BOOLEAN", "the request named a session (affinity)"),
        _c("guardrail_hit", "BOOLEAN", "a guardrail keyword matched (the keyword is not kept)"),
        _c("model_error", "VARCHAR", "why `model` could not be read, if it could not"),
        _c("request_topic", "VARCHAR", "where the platform published it"),
        _c("request_partition", "INTEGER", "its partition there"),
        _c("request_offset", "BIGINT", "its offset there"),
        *POSITION,
    ),
)

#: What each decision column means (app/audit/decision_fields.py derives the columns
#: from the model: a field the decision gains is a column before it is described here).
_DECISION_DOCS = {
    "attempt": "attempt number, from 1",
    "route": "route",
    "deployment": "the chosen deployment (`provider:model`)",
    "provider": "its provider",
    "model": "its model",
    "strategy": "`ucb1`, `thompson`, `composite`, `adaptive`",
    "algorithm_version": "version of the algorithm that decided",
    "config_hash": "hash of the routing config and parameters",
    "policy_version": "policy version in force on the route (0: none)",
    "state_version": "routing-log offset the decision was computed at",
    "propensity": "probability the strategy chose this deployment",
    "selection_rule": "`score`, `untried_first`, `half_open_probe`, `retry_same_deployment`, "
    "`auto` or `affinity`",
    "domain": "detected domain, if any",
    "candidate_filter": "how the domain narrowed the candidates",
    "mode": "routing mode",
    "mode_source": "which setting chose the mode",
    "context": "context key (tenant, domain, length, code), if any",
    "context_level": "bucket the chosen estimate came from",
    "context_depth": "how coarse that bucket is (0: finest)",
    "pacer_multiplier": "budget pacer's cost multiplier, if any",
    "cost_target_usd": "budget target per request, if any",
    "affinity": "the affinity pin followed (`session` or `context`), if any",
    "prompt_sha256": "SHA-256 of the prompt",
    "prompt_chars": "prompt length",
}
#: Column types by Python type; a routing-log offset is a BIGINT.
_TYPES = {str: "VARCHAR", int: "INTEGER", float: "DOUBLE", bool: "BOOLEAN", datetime: "TIMESTAMPTZ"}
_DECISION_TYPES = {"state_version": "BIGINT"}


def _decision_column(name: str, kind: type) -> Column:
    for shared in (ID, AT, REQUEST):
        if shared.name == name:
            return shared
    doc = _DECISION_DOCS.get(name, f"the decision's `{name}`")
    return _c(name, _DECISION_TYPES.get(name, _TYPES[kind]), doc)


DECISIONS = Table(
    "decisions",
    "one row per routing decision (`llm.decisions`: one per attempt)",
    (
        *(_decision_column(name, kind) for name, kind in DECISION_COLUMNS.items()),
        _c(
            "previous_state_version",
            "BIGINT",
            "the state version of the route's previous decision (-1: none), kept by the store",
        ),
        _c("n_candidates", "INTEGER", "number of candidates scored"),
        _c("n_excluded", "INTEGER", "number of deployments excluded"),
        _c("candidates", "JSON", "`[{deployment, score, factors: {name: contribution}}]`"),
        _c("excluded", "JSON", "`[{deployment, reason}]`"),
        _c("details", "JSON", "every other decision field as recorded (the audit's context)"),
        *POSITION,
    ),
)

OUTCOMES = Table(
    "outcomes",
    "one row per attempt outcome (`llm.outcomes`, or the routing log's `attempt.finished`)",
    (
        ID,
        AT,
        REQUEST,
        _c("attempt", "INTEGER", "attempt number"),
        _c("route", "VARCHAR", "route"),
        _c("deployment", "VARCHAR", "deployment called"),
        _c("provider", "VARCHAR", "its provider"),
        _c("model", "VARCHAR", "its model"),
        _c("decision_id", "VARCHAR", "the decision this attempt carried out"),
        _c("status_class", "VARCHAR", "`success`, `server_error`, `timeout`, ..."),
        _c("http_status", "INTEGER", "HTTP status, if any"),
        _c("latency_ms", "DOUBLE", "call latency"),
        _c("tokens_in", "INTEGER", "input tokens"),
        _c("tokens_out", "INTEGER", "output tokens"),
        _c("tokens_cached", "INTEGER", "cached input tokens"),
        _c("cost_usd", "DOUBLE", "cost of the call"),
        _c("reward", "DOUBLE", "reward the bandit learnt"),
        _c("finish_reason", "VARCHAR", "provider's finish reason"),
        _c("retriable", "BOOLEAN", "the failure may be retried elsewhere"),
        _c("retry_after_s", "DOUBLE", "provider's Retry-After"),
        _c("confidence", "DOUBLE", "exp(mean token log-probability), if reported"),
        _c("first_token_ms", "DOUBLE", "time to first token (streamed calls)"),
        _c("final", "BOOLEAN", "this attempt ended the request"),
        _c("error", "VARCHAR", "error class and short detail (never content)"),
        _c("context", "VARCHAR", "the decision's context key"),
        *POSITION,
    ),
)

RESPONSES = Table(
    "responses",
    "one row per response (`llm.responses`); the completion's metadata only, never its text",
    (
        ID,
        AT,
        REQUEST,
        _c("status", "VARCHAR", "`ok` or `error`"),
        _c("attempts", "INTEGER", "attempts the request took"),
        _c("deployment", "VARCHAR", "deployment that answered"),
        _c("error_type", "VARCHAR", "error type, for an error"),
        _c("error_message", "VARCHAR", "error message (the router's, never content)"),
        _c("error_code", "VARCHAR", "error code"),
        _c("error_http_status", "INTEGER", "HTTP status the gateway answers with"),
        _c("error_retry_after_s", "DOUBLE", "seconds after which asking again may succeed"),
        _c("completion_id", "VARCHAR", "the completion's `id`"),
        _c("completion_model", "VARCHAR", "the completion's `model`"),
        _c("finish_reason", "VARCHAR", "first choice's finish reason"),
        _c("choices", "INTEGER", "number of choices"),
        _c("prompt_tokens", "INTEGER", "usage: prompt tokens"),
        _c("completion_tokens", "INTEGER", "usage: completion tokens"),
        _c("total_tokens", "INTEGER", "usage: total tokens"),
        _c("completion_chars", "INTEGER", "length of the answer text (the text is not kept)"),
        *POSITION,
    ),
)

FEEDBACK = Table(
    "feedback",
    "one row per valid feedback (`llm.feedback`); invalid records are counted, not kept",
    (
        _c("id", "VARCHAR", "the grade id the worker derives from request and feedback id"),
        REQUEST,
        _c("feedback_id", "VARCHAR", "the feedback's id (derived when absent)"),
        _c("source", "VARCHAR", "`user`, `judge`, `task`, `heuristic`"),
        _c("score", "DOUBLE", "the grade in [0, 1] (a label's score)"),
        _c("label", "VARCHAR", "the label, when one was sent"),
        _c("weight", "DOUBLE", "the grade's weight"),
        _c("occurred_at", "TIMESTAMPTZ", "the sender's time (informational, may be null)"),
        *POSITION,
    ),
)

GRADES = Table(
    "grades",
    "one row per grade applied (`grade.applied` on the routing log)",
    (
        ID,
        AT,
        REQUEST,
        _c("route", "VARCHAR", "route"),
        _c("deployment", "VARCHAR", "deployment whose answer is graded"),
        _c("context", "VARCHAR", "context key of the answering decision"),
        _c("source", "VARCHAR", "grade source"),
        _c("score", "DOUBLE", "grade"),
        _c("weight", "DOUBLE", "weight"),
        _c("feedback_id", "VARCHAR", "the feedback it came from"),
        _c("replaces_score", "DOUBLE", "the grade it replaces, if any"),
        _c("replaces_weight", "DOUBLE", "its weight"),
        *POSITION,
    ),
)

POLICY_CHANGES = Table(
    "policy_changes",
    "one row per policy change per route (`policy.changed` on the routing log)",
    (
        ID,
        AT,
        _c("route", "VARCHAR", "route"),
        _c("version", "INTEGER", "policy version in force from this position on"),
        _c("hash", "VARCHAR", "hash of the policy document"),
        _c("source", "VARCHAR", "`start`, `apply`, `sighup`, `rollback`"),
        _c("document", "JSON", "the policy document (no secrets: keys stay `${VARIABLE}`)"),
        *POSITION,
    ),
    indexed=(),
)

SINK_OFFSETS = Table(
    "sink_offsets",
    "the next offset to read per topic partition, committed with the rows",
    (
        _c("kafka_topic", "VARCHAR", "topic"),
        _c("kafka_partition", "INTEGER", "partition"),
        _c("next_offset", "BIGINT", "first offset not folded yet"),
    ),
    key=("kafka_topic", "kafka_partition"),
    indexed=(),
)

SKIPPED = Table(
    "skipped_records",
    "records the sink could not read (position and reason, never content)",
    (
        *POSITION,
        _c("reason", "VARCHAR", "`not_json`, `invalid`, `unknown_type` or a dead-letter reason"),
    ),
    key=("kafka_topic", "kafka_partition", "kafka_offset"),
    indexed=(),
)

#: Tables of events, in the order the docs list them.
EVENT_TABLES = (REQUESTS, DECISIONS, OUTCOMES, RESPONSES, FEEDBACK, GRADES, POLICY_CHANGES)
TABLES = {t.name: t for t in (*EVENT_TABLES, SINK_OFFSETS, SKIPPED)}

_ARROW = {
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
}


def arrow_schema(table: Table) -> pa.Schema:
    return pa.schema([(c.name, _ARROW[c.type]) for c in table.columns])


def create_statements(table: Table) -> list[str]:
    columns = ", ".join(f"{c.name} {c.type}" for c in table.columns)
    statements = [
        f"CREATE TABLE IF NOT EXISTS {table.name} ({columns}, PRIMARY KEY ({', '.join(table.key)}))"
    ]
    # A store made by an earlier version gets the columns added since (empty for its rows).
    statements += [
        f"ALTER TABLE {table.name} ADD COLUMN IF NOT EXISTS {c.name} {c.type}"
        for c in table.columns
    ]
    statements += [
        f"CREATE INDEX IF NOT EXISTS {table.name}_{name} ON {table.name} ({name})"
        for name in table.indexed
    ]
    return statements
