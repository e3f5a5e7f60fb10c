"""The worker's Faust application, built by a factory when a worker starts.

:func:`worker_app` builds it once, from the process's settings, with the worker's Faust
patches installed (app/worker/): the agents (``agents/``), tables (``tables/``) and
views register on it when the worker imports them (``switchyard worker``). Importing
this module builds nothing: no module under ``app/`` builds Faust's application.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from functools import cache
from typing import Any

import faust
from mode.utils.objects import cached_property
from mode.utils.queues import FlowControlEvent

from app.compat import tansu
from app.kafka import faust_security
from app.lifetime import exit_after
from app.settings import Settings, get_settings
from app.web_auth import faust_web_options
from app.worker import fast_delivery, fetch_wait, read_committed, seek_start
from app.worker.flow_control import LiveFlowControl
from app.worker.quiet_monitor import QuietMonitor


@cache
def worker_app() -> SwitchyardApp:
    """The worker's application (built at the first call, from the process's settings)."""
    return build_app(get_settings())


def build_app(settings: Settings) -> SwitchyardApp:
    seek_start.install()
    fetch_wait.install(
        settings.fetch_max_wait_ms,
        tansu.idle_fetch_wait_ms(settings) if settings.tansu_compat else fetch_wait.IDLE_WAIT_MS,
    )
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
        limit = get_settings().shutdown_timeout_s
        exit_after(limit, f"stopping took over {limit:g}s")
        super()._schedule_shutdown(signal)


def changelog_topics(app: faust.App, partitions: int) -> dict[str, tuple[int, dict[str, str]]]:
    """Every table's changelog topic as Faust declares it: partitions (``partitions``
    where the table names none) and configs."""
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
        found[topic.get_topic_name()] = (topic.partitions or partitions, configs)
    return found


def table_store_options(settings: Settings) -> dict[str, Any]:
    """Options for ``app.Table`` (``Settings.rocksdb_*``): a new dict each call (faust's
    store mutates the one it gets)."""
    return {
        "write_buffer_size": settings.rocksdb_write_buffer_bytes,
        "max_write_buffer_number": settings.rocksdb_max_write_buffers,
        "block_cache_size": settings.rocksdb_block_cache_bytes,
    }
