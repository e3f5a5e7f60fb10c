"""The Faust application, its topics and the worker class that runs it.

Agents (``agents/*``), tables (``tables/*``) and views (``agents/web.py``) register
against ``app``. It is built when this module is first imported, which only the
worker does (``switchyard worker``: app/cli.py imports the agents): nothing under
``app/`` imports Faust's application.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import faust
from aiokafka.errors import KafkaTimeoutError
from mode.utils.objects import cached_property
from mode.utils.queues import FlowControlEvent

from app.compat import tansu
from app.embedded.lifetime import exit_after
from app.kafka import faust_security
from app.settings import Settings, get_settings
from app.web_auth import faust_web_options
from app.worker import fast_delivery, read_committed, seek_start
from app.worker.flow_control import LiveFlowControl
from app.worker.quiet_monitor import QuietMonitor

log = logging.getLogger(__name__)


def build_app(settings: Settings) -> SwitchyardApp:
    seek_start.install()
    if settings.tansu_compat:
        tansu.install()
    if settings.fast_delivery:
        fast_delivery.install()
    if settings.exactly_once:
        read_committed.read_committed()
    return SwitchyardApp(
        settings.app_id,
        broker=settings.broker,
        store="rocksdb://",
        datadir=str(settings.data_dir),
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=settings.heartbeat_interval_s,
        consumer_auto_offset_reset="earliest",
        table_standby_replicas=settings.table_standby_replicas,
        key_serializer="raw",
        value_serializer="raw",
        # web_bind is the address the server listens on (Faust's default: every interface);
        # web_host only names it in the URLs Faust builds.
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_in_thread=False,
        **faust_web_options(settings),
        # SASL/TLS (SWITCHYARD_KAFKA_*): the consumers, producers and admin client Faust builds.
        **faust_security(settings),
        producer_linger_ms=settings.producer_linger_ms,
        # Room for the largest request's envelopes (Settings.max_record_bytes): Faust's
        # default, 1,000,000, refused a valid 999.7 KB request's RequestAccepted.
        producer_max_request_size=settings.producer_max_request_size,
        # Faust's own guarantee stays at-least-once (every update is idempotent); with
        # SWITCHYARD_EXACTLY_ONCE the router's and the calls' writes are transactions of
        # their own (app/worker/transactions.py).
        processing_guarantee="at_least_once",
        # Do not wait, on a rebalance or a stop, for the events agents have not acked:
        # the router acks an event only once a written row includes it, and writes rows
        # for the last events of a partition only when the next event comes, which a
        # rebalance holds back: waiting froze every rebalance (bench scaleout). Unacked
        # events are redelivered, and every fold is idempotent.
        stream_wait_empty=False,
        # Faust's monitor counts every record read, sent and every table access; nothing
        # reads those counts (our metrics are Prometheus'): app/worker/quiet_monitor.py.
        Monitor=QuietMonitor,
    )


class SwitchyardApp(faust.App):
    """Faust's app with a flow control that does not drop a running flow's records on a
    rebalance (app/worker/flow_control.py), and hooks that run when an assignment arrives,
    before Faust's own handling (the tables' restore) starts."""

    #: Told each assignment first (agents/exactly_once.py fences there).
    before_assignment: list[Callable[[set[Any]], Awaitable[None]]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before_assignment = []

    @cached_property
    def flow_control(self) -> FlowControlEvent:
        return LiveFlowControl(loop=self.loop)

    async def _on_partitions_assigned(self, assigned: set[Any], generation_id: int = 0) -> None:
        for hook in self.before_assignment:
            await hook(assigned)
        await super()._on_partitions_assigned(assigned, generation_id)


class SwitchyardWorker(faust.Worker):
    """Faust's worker without its terminal spinner.

    Faust's worker turns a spinner once per log record: it adds a handler at DEBUG to the
    root logger and lowers the root logger to DEBUG, so every ``log.debug`` of aiokafka and
    mode builds and dispatches a record even at ``warn``: 5-6 % of the worker's py-spy
    samples under ``switchyard bench throughput``, 0.1-0.4 % without. Our logs go to files
    and pipes, where the spinner draws nothing anyway. Without a spinner, faust leaves the
    root logger at ``settings.log_level``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spinner = None

    def _schedule_shutdown(self, signal: signal.Signals) -> None:
        """SIGTERM or SIGINT: a clean stop (offsets committed, tables flushed) if the broker
        answers, and an exit ``shutdown_timeout_s`` after the signal whatever happens (a
        stopped broker holds a commit or a flush for its whole request timeout)."""
        limit = settings.shutdown_timeout_s
        exit_after(limit, f"stopping took over {limit:g}s")
        super()._schedule_shutdown(signal)


def changelog_topics() -> dict[str, tuple[int, dict[str, str]]]:
    """Every table's changelog topic as Faust declares it: partitions and configs."""
    found = {}
    for table in app.tables.values():
        topic: Any = table.changelog_topic
        configs = {str(k): str(v) for k, v in (topic.config or {}).items()}
        if "cleanup.policy" not in configs:
            policy = [
                p for p, on in (("compact", topic.compacting), ("delete", topic.deleting)) if on
            ]
            if policy:
                configs["cleanup.policy"] = ",".join(policy)
        found[topic.get_topic_name()] = (topic.partitions or settings.partitions, configs)
    return found


def table_store_options(settings: Settings) -> dict[str, Any]:
    """Options for ``app.Table`` (``Settings.rocksdb_*``): a new dict each call (faust's
    store mutates the one it gets)."""
    return {
        "write_buffer_size": settings.rocksdb_write_buffer_bytes,
        "max_write_buffer_number": settings.rocksdb_max_write_buffers,
        "block_cache_size": settings.rocksdb_block_cache_bytes,
    }


settings = get_settings()
app = build_app(settings)


def _topic(name: str) -> faust.TopicT:
    return app.topic(name, key_type=bytes, value_type=bytes, partitions=settings.partitions)


class Publisher:
    """Writes records to one topic with the worker's producer, without Faust's channel
    layer (its ``FutureMessage``, codecs and per-send sensors): one record sent by
    ``Topic.send`` cost 65-71 µs of CPU here, 28-32 µs this way (``switchyard bench
    record_cost``).

    ``send`` returns the future of the record's delivery. A send the producer gives up on
    for a passing reason (a broker stalled past the producer's request timeout, a leader
    moving) is sent again, after a growing pause, until a copy is delivered: what waits
    on the future (the router's row, an ack) waits with it, and nothing is dropped. A copy
    that reached the broker twice is the same record twice (consumers take a record id
    once). A send refused for the record itself (its size) fails the future.
    """

    __slots__ = ("name", "on_delivered")

    def __init__(self, name: str) -> None:
        self.name = name
        #: Told ``(partition, offset, value)`` of each record the broker acknowledged.
        self.on_delivered: Callable[[int, int, bytes], None] | None = None

    def get_topic_name(self) -> str:
        return self.name

    async def send(
        self,
        *,
        key: bytes | None,
        value: bytes | str,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[Any]:
        data = value.encode() if isinstance(value, str) else value
        sent = cast(
            "asyncio.Future[Any]",
            await app.producer.send(self.name, key, data, partition, None, headers),
        )
        delivered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        record = _Record(self, key, data, partition, headers, delivered)
        sent.add_done_callback(record.settle)
        return delivered


#: Seconds before a record the producer gave up on is sent again (doubling up to the last).
RESEND_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)
#: Sends under way again (a reference each, until done).
_resending: set[asyncio.Future[Any]] = set()


def resendable(problem: BaseException) -> bool:
    """A send failure that passes: the broker's or the network's, not the record's."""
    return bool(getattr(problem, "retriable", False)) or isinstance(problem, KafkaTimeoutError)


@dataclass(slots=True)
class _Record:
    publisher: Publisher
    key: bytes | None
    data: bytes
    partition: int | None
    headers: list[tuple[str, bytes]] | None
    delivered: asyncio.Future[Any]
    resent: int = 0

    def settle(self, sent: asyncio.Future[Any]) -> None:
        if self.delivered.done():
            return
        problem = asyncio.CancelledError() if sent.cancelled() else sent.exception()
        if problem is None:
            metadata = sent.result()
            self.delivered.set_result(metadata)
            report = self.publisher.on_delivered
            if report is not None:
                report(metadata.partition, metadata.offset, self.data)
        elif resendable(problem):
            wait = RESEND_BACKOFF_S[min(self.resent, len(RESEND_BACKOFF_S) - 1)]
            log.warning("a record of %s was not delivered (%s); sent again in %gs",
                        self.publisher.name, type(problem).__name__, wait)  # fmt: skip
            again = asyncio.ensure_future(self._again(wait))
            _resending.add(again)
            again.add_done_callback(_resending.discard)
        else:
            self.delivered.set_exception(problem)

    async def _again(self, wait: float) -> None:
        await asyncio.sleep(wait)
        self.resent += 1
        name = self.publisher.name
        try:
            sent = await app.producer.send(
                name, self.key, self.data, self.partition, None, self.headers
            )
        except Exception as exc:  # the producer refused it now: the same rules
            sent = asyncio.get_running_loop().create_future()
            sent.set_exception(exc)
        cast("asyncio.Future[Any]", sent).add_done_callback(self.settle)


#: Topics agents read (Faust topics), then the worker's writers (one per topic it writes).
requests_topic = _topic(settings.topics.requests)
routing_topic = _topic(settings.topics.routing)
dispatch_topic = _topic(settings.topics.dispatch)
spill_topic = _topic(settings.topics.spill)
routing_log = Publisher(settings.topics.routing)
dispatch_log = Publisher(settings.topics.dispatch)
spill_log = Publisher(settings.topics.spill)
decisions_topic = Publisher(settings.topics.decisions)
outcomes_topic = Publisher(settings.topics.outcomes)
responses_topic = Publisher(settings.topics.responses)
deadletter_topic = Publisher(settings.topics.deadletter)
#: One partition: its order numbers the policy versions.
policy_topic = app.topic(settings.topics.policy, key_type=bytes, value_type=bytes, partitions=1)
