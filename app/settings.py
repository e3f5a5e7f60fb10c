"""The one settings object.

Every tunable of the process is read here, from the environment, once. Routing
parameters keep the bandit algorithm's variable names (``BANDIT_STRATEGY``,
``CB_TIMEOUT_S`` ...); everything that belongs to the process itself is
prefixed ``SWITCHYARD_``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.kafka_security import KafkaSecurity
from app.routing.params import RoutingParams, params_from_env

#: Defaults of ``max_json_depth`` and ``max_int_digits`` (app/ingest.py takes them too).
DEFAULT_MAX_JSON_DEPTH = 64
DEFAULT_MAX_INT_DIGITS = 100
#: Defaults of the provider-call HTTP pool (app/execution/http.py takes them too).
DEFAULT_HTTP_MAX_CONNECTIONS = 512
DEFAULT_HTTP_KEEPALIVE_EXPIRY_S = 30.0
#: A record's key (a route name or a request id, at most a few hundred bytes) and its
#: framing in a Kafka record batch (aiokafka estimates ~70 bytes): room to spare.
RECORD_FRAMING_BYTES = 4096


class Topics(BaseSettings):
    """Topic names: the only place they are spelled."""

    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_TOPIC_", frozen=True)

    requests: str = "llm.requests"
    decisions: str = "llm.decisions"
    outcomes: str = "llm.outcomes"
    responses: str = "llm.responses"
    deadletter: str = "llm.deadletter"
    #: Internal: accepted requests and attempt feedback, keyed by route, in the
    #: order the route's single writer applies them. This is the routing log.
    routing: str = "switchyard.routing"
    #: Internal: a decision together with the request it routes, keyed by route (so it
    #: lives on the routing log's partition): the durable hand-off of a call the deciding
    #: worker makes itself; after a crash the partition's next owner makes the calls of
    #: the attempts still open (agents/handoff.py).
    dispatch: str = "switchyard.dispatch"
    #: Internal: dispatches the deciding worker has no room to call itself, keyed by
    #: request id, called by any worker's executors.
    spill: str = "switchyard.spill"
    #: Quality grades of answers, keyed as the producer likes.
    feedback: str = "llm.feedback"
    #: Internal: valid feedback re-keyed by request id, co-partitioned with ``outcomes``.
    feedback_matching: str = "switchyard.feedback"
    #: Internal: one record per worker start, to tell how the broker answers fetches
    #: (app/compat/detect.py).
    probe: str = "switchyard.probe"
    #: Internal: copies of responses for the gateways, sent to the partition the
    #: request's ``reply_to`` names; each gateway reads only its own partition(s).
    replies: str = "switchyard.replies"
    #: Internal: the pieces of streamed answers (``response.delta``), sent to the
    #: partition the request's ``reply_to`` names (by request id without one); kept, so
    #: every stream can be reassembled (``switchyard streams``).
    deltas: str = "switchyard.deltas"
    #: Proposed policies, one partition: its order numbers the versions; the
    #: relay copies each new version onto the routing log (agents/policy.py).
    policy: str = "llm.policy"


class Settings(BaseSettings):
    """Process settings. ``SWITCHYARD_BROKER`` names the Kafka cluster to use."""

    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_", frozen=True)

    broker: str = "kafka://127.0.0.1:9092"
    providers: Path = Field(
        default=Path("providers.yaml"),
        validation_alias=AliasChoices("SWITCHYARD_PROVIDERS", "SWITCHYARD_PROVIDERS_FILE"),
    )
    app_id: str = "switchyard"
    data_dir: Path = Path(".switchyard/data")
    partitions: int = Field(default=4, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    #: Replicas that must have a record before a producer (``acks=all``, all of ours) is
    #: told it is written: 2 of 3 lets one broker die without losing an acknowledged write.
    min_insync_replicas: int = Field(default=1, ge=1)
    web_host: str = "127.0.0.1"
    web_port: int = Field(default=6066, ge=1, le=65535)
    #: Faust's own ``/table/*`` and ``/router/*`` views: off (404) unless set, and then
    #: behind the admin token (app/web_auth.py).
    web_builtin_views: bool = False
    #: ``Authorization: Bearer`` token of every HTTP view but ``/metrics`` and ``/``; unset:
    #: those views are served to loopback clients only. Never logged.
    admin_token: SecretStr | None = None
    #: ``Authorization: Bearer`` token of ``/metrics``: unset, ``/metrics`` is
    #: open (the admin token is accepted too when both are set). Never logged.
    metrics_token: SecretStr | None = None
    #: The master key that opens the credentials tenants bring (app/credentials/): a
    #: Fernet key (``switchyard credentials new-key``). Never logged.
    credentials_key: SecretStr | None = None
    #: A worker stopped by SIGTERM or SIGINT commits what it can, then exits this long after
    #: the signal whatever the broker's state (app/lifetime.py).
    shutdown_timeout_s: float = Field(default=7.0, gt=0.0, le=300.0)
    session_timeout_s: float = 6.0
    heartbeat_interval_s: float = 1.0
    #: Provider calls one worker's executors run at once. An attempt counts against its
    #: deployment's ``max_concurrency`` from decision to outcome, so this covers the sum
    #: of the deployments' ``max_concurrency`` (two at 500 in ``bench burst``): a decided
    #: attempt then starts its call one broker hop after its decision, not in a queue.
    executor_concurrency: int = Field(default=1024, ge=1)
    #: The worker's one pooled HTTP client for provider calls (app/execution/http.py):
    #: connections open at once, and how long an idle one is kept for reuse.
    http_max_connections: int = Field(default=DEFAULT_HTTP_MAX_CONNECTIONS, ge=1)
    http_keepalive_expiry_s: float = Field(default=DEFAULT_HTTP_KEEPALIVE_EXPIRY_S, ge=0.0)
    #: RocksDB options of each table partition's database (tables/*). Faust's defaults are
    #: sized for big tables: 64 MiB write buffers (up to 3) and a 2 GiB block cache each;
    #: under ``switchyard bench throughput`` they took the worker's peak RSS to ~166 MB,
    #: these to 104-113 MB. A table holds a small row per route or answer, so smaller
    #: memtables only flush more often. Memtable size, how many may be held at once, and
    #: the block cache (reads of rows not in the table's memory).
    rocksdb_write_buffer_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024)
    rocksdb_max_write_buffers: int = Field(default=2, ge=1)
    rocksdb_block_cache_bytes: int = Field(default=8 * 1024 * 1024, ge=0)
    #: Standby copies of each table partition other workers keep (Faust's
    #: ``table_standby_replicas``): a worker taking a partition over starts from its copy
    #: instead of reading the whole changelog, but every standby reads every changelog
    #: record of the partitions it mirrors.
    table_standby_replicas: int = Field(default=1, ge=0)
    #: The router writes a route's row (one changelog record) once per batch of events
    #: read together, and at least every this many events of the route.
    router_batch_max: int = Field(default=256, ge=1)
    #: ... and at most this often per partition: a route's row is a few kilobytes plus
    #: ~110 bytes per attempt in flight (112 KB with 1,000), too much to write per event.
    router_flush_interval_s: float = Field(default=0.1, ge=0.0)
    #: The router folds a routing-log record this worker wrote as soon as the broker
    #: acknowledged it, when it is the next record of its partition (app/worker/local_log.py).
    router_local_fold: bool = True
    #: With the local fold: a request's call starts while its routing-log record is on its
    #: way to the broker, when the router's fold of it can be foreseen; its records wait for
    #: that fold to decide the same call (app/router/ahead.py).
    call_ahead: bool = True
    #: Exactly-once answers (app/worker/transactions.py): the router's and the calls' records
    #: are written in Kafka transactions and the worker reads ``read_committed``. Needs a
    #: broker with transactions (Apache Kafka; not Tansu); turns the local fold off.
    exactly_once: bool = False
    #: Faust's fetch loop hands a record to the streams inline when that does not block
    #: (app/worker/fast_delivery.py) instead of racing four tasks per record.
    fast_delivery: bool = True
    #: Spilled dispatches (``switchyard.spill``: the deciding worker had no room) one
    #: worker calls at once.
    spill_concurrency: int = Field(default=128, ge=1)
    #: Per route, how many bytes of waiting requests the router keeps in memory; the
    #: rest of a backlog is read back from the routing log when its turn comes.
    recall_memory_bytes: int = Field(default=16 * 1024 * 1024, ge=0)
    #: Largest accepted request, in bytes of its JSON (as published, and as re-serialised).
    max_request_bytes: int = Field(default=1_000_000, ge=1024)
    #: Room for what an envelope adds around one request or one completion (ids, features,
    #: a decision's candidate list, an outcome): see ``max_record_bytes``.
    envelope_room_bytes: int = Field(default=256 * 1024, ge=16 * 1024)
    #: Deepest nesting of arrays and objects in a request (deeper: dead letter ``too_deep``).
    max_json_depth: int = Field(default=DEFAULT_MAX_JSON_DEPTH, ge=8, le=500)
    #: Most digits of one integer in a request (more: ``bad_number``; Python stops at 4,300).
    max_int_digits: int = Field(default=DEFAULT_MAX_INT_DIGITS, ge=20, le=4300)
    #: How much of a rejected event the dead-letter record keeps.
    deadletter_max_bytes: int = Field(default=4096, ge=64)
    #: Turn on the Tansu workarounds (``app.compat.tansu``). The embedded stack sets it.
    tansu_compat: bool = False
    #: Fetch long-poll of Switchyard's consumers, ms. Tansu looks for new records only at
    #: a fetch's start, partway through its wait (most often halfway) and at its end, so
    #: each broker hop waits up to this; a shorter wait means more empty fetches while
    #: idle (worker and broker CPU). Apache Kafka answers as soon as a record arrives.
    fetch_max_wait_ms: int = Field(default=10, ge=1, le=10_000)
    #: ... and the wait of a long-lived consumer (the worker's on Tansu, a follower's, the
    #: gateway's) once it has received no record for a second: fewer empty fetches while
    #: idle; the first record after a quiet spell waits up to this on its first hop
    #: (app/compat/fetch_pacing.py). The worker's idle wait on Apache Kafka is 500 ms
    #: (app/worker/fetch_wait.py).
    fetch_idle_wait_ms: int = Field(default=20, ge=1, le=10_000)
    #: How long Switchyard's producers hold a record to batch it (aiokafka ``linger_ms``).
    #: Records batch anyway while the previous request to the broker is in flight; a
    #: linger delays every record and on Tansu makes it miss a fetch's halfway look:
    #: 0 took 3-5 ms off the added p50 (docs/benchmarks.md, "Producer linger 0").
    producer_linger_ms: int = Field(default=0, ge=0, le=1000)
    log_level: str = "warn"
    #: How often each worker publishes a RouteTick per route (seconds).
    tick_interval_s: float = Field(default=5.0, gt=0.0)
    #: How long after its answer a request can still be graded.
    feedback_window_s: float = Field(default=24 * 3600.0, gt=0.0)
    #: How long feedback waits for the outcome of its request to reach the answers table.
    feedback_match_grace_s: float = Field(default=60.0, gt=0.0)
    #: Largest feedback record, in bytes (more: dead letter ``oversized``).
    feedback_max_bytes: int = Field(default=16 * 1024, ge=1024)
    #: The OpenAI-compatible gateway (app/gateway/): where it listens, the
    #: partitions of the replies topic it owns (each gateway its own), how many requests
    #: may wait for their answer at once (beyond: 429 at once), how long a client may take
    #: to send its body (408), and how many records of a ``llm.responses`` partition a
    #: lookup by request id reads back.
    gateway_host: str = "127.0.0.1"
    gateway_port: int = Field(default=8080, ge=0, le=65535)
    gateway_reply_partitions: list[int] = Field(default=[0], min_length=1)
    gateway_max_waiting: int = Field(default=1000, ge=1)
    gateway_body_timeout_s: float = Field(default=30.0, gt=0.0)
    gateway_lookup_window: int = Field(default=50_000, ge=1)
    #: How long a client may take to send a request's line and headers once it started
    #: (then 408 and the connection is closed; an idle connection: the keep-alive timeout).
    gateway_header_timeout_s: float = Field(default=10.0, gt=0.0)
    #: Streamed answers: the executor publishes a stream's first piece at once,
    #: then what came since at most this often (one ``response.delta`` per interval).
    stream_flush_interval_s: float = Field(default=0.02, ge=0.0)
    #: The analytics store (app/analytics/): the DuckDB file the sink folds the
    #: public topics into, and where ``switchyard console`` listens (loopback by default).
    analytics_db: Path = Path(".switchyard/analytics.duckdb")
    console_host: str = "127.0.0.1"
    console_port: int = Field(default=6070, ge=0, le=65535)
    #: Where the console runs (``http://HOST:PORT``): the worker's ``/admin/trace/{id}``
    #: then redirects there (answered from the store); unset, the worker reads the topics.
    console_url: str | None = Field(default=None, pattern=r"^https?://[^\s/]+$")

    topics: Topics = Field(default_factory=Topics)
    #: SASL and TLS of every Kafka client (``SWITCHYARD_KAFKA_*``, app/kafka_security.py).
    kafka_security: KafkaSecurity = Field(default_factory=KafkaSecurity)
    #: Read from the process environment here, where the process starts; the fold gets
    #: them as values (app/routing/params.py).
    routing: RoutingParams = Field(default_factory=lambda: params_from_env(os.environ))

    @field_validator("data_dir")
    @classmethod
    def _data_dir_can_be_made(cls, value: Path) -> Path:
        """An absolute data dir's parent must exist (a typo is an error, not a new tree);
        a relative one (the default) is made in the working directory, parents included."""
        if value.exists() and not value.is_dir():
            raise ValueError(f"{value} exists and is not a directory")
        if value.is_absolute() and not value.parent.is_dir():
            raise ValueError(f"parent directory {value.parent} does not exist")
        return value

    @model_validator(mode="after")
    def _transactions_need_a_broker_with_them(self) -> Settings:
        if self.exactly_once and self.tansu_compat:
            raise ValueError(
                "SWITCHYARD_EXACTLY_ONCE needs a broker with transactions; Tansu has none"
            )
        return self

    @property
    def max_record_bytes(self) -> int:
        """The largest record value a worker writes: a request or a completion plus its envelope.

        With R = ``max_request_bytes`` and E = ``envelope_room_bytes`` (defaults 1,000,000 and
        262,144): ingest accepts a request whose ``RequestAccepted`` is at most R + E/4 (the
        re-serialised request, plus ~1-2 KB of ids, features and source). The ``Dispatch``
        that embeds it adds a decision (~300 bytes per candidate, so E x 3/4 covers ~600
        candidates); the ``AttemptFinished`` that carries it as ``retry`` adds an outcome
        (~1 KB). A completion is delivered when its ``AttemptFinished`` fits in R + E
        (``response_too_large`` otherwise), and its ``Response`` is smaller still.
        """
        return self.max_request_bytes + self.envelope_room_bytes

    @property
    def max_accepted_bytes(self) -> int:
        """The largest ``RequestAccepted`` ingest forwards (see ``max_record_bytes``)."""
        return self.max_request_bytes + self.envelope_room_bytes // 4

    @property
    def producer_max_request_size(self) -> int:
        """Every producer's ``max_request_size``: the largest record plus its key and framing."""
        return self.max_record_bytes + RECORD_FRAMING_BYTES


def describe_error(error: ValidationError) -> str:
    """One line naming each bad setting by its environment variable, without its value."""
    prefix = {
        "Topics": "SWITCHYARD_TOPIC_",
        "Settings": "SWITCHYARD_",
        "KafkaSecurity": "SWITCHYARD_KAFKA_",
    }.get(error.title, "")
    parts = []
    for item in error.errors():
        name = str(item["loc"][0]) if item["loc"] else "(settings)"
        if prefix and not name.isupper():
            name = prefix + name.upper()
        message = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{name}: {message}")
    return "; ".join(parts)


#: The setting models, whose validation errors ``describe_error`` explains.
SETTINGS_MODELS = frozenset({"Settings", "Topics", "RoutingParams", "KafkaSecurity"})


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
