"""Exactly-once answers on a broker with transactions (``SWITCHYARD_EXACTLY_ONCE``).

At-least-once (the default, and the only mode on Tansu) lets a record reach a topic
twice after a kill: consumers take a record id once. With exactly-once on, a
``read_committed`` consumer of ``llm.decisions``, ``llm.outcomes`` and ``llm.responses``
sees each record once, across kills and rebalances. How (docs/design.md, "Exactly
once"):

* **The router** writes, per routing partition, in one transaction: the records its folds
  produced (decisions, dispatches, routing-log records, error answers) and the changelog
  records of the rows that include those folds. Only once the transaction is committed
  does it write the rows to its local store and ack the events. A kill before the commit
  aborts the transaction: the events are folded again from the committed rows, and send
  the same records, once. The row is what makes an event already applied a no-op, so the
  consumed offsets need not be in the transaction.
* **The calls** start only from a committed dispatch record, so a call never runs for a
  decision that a kill took back: in the deciding worker once the router's transaction
  that wrote it is committed, when nothing below makes it wait, else once the hand-off
  agent reads it ``read_committed`` (agents/handoff.py). The call's answer, outcome and
  feedback are written in one transaction. After a partition changes hands, its
  dispatches wait until the router has folded the routing log up to where it stood once
  this worker owned the partition (:class:`CatchUp`): every feedback a previous owner
  committed is then in the row, and a call whose attempt it closed is not made again. A
  call whose feedback was not committed before a kill is made again (one provider call
  more, counted once: only one outcome is ever committed).
* **Fencing**: each partition has its own transactional id per role
  (``<app id>-router-<partition>``, ``<app id>-calls-<partition>``). A worker that takes a
  partition over starts its producers first, which aborts a previous owner's open
  transaction and fences it: a worker that lost a partition (paused, cut off) cannot
  commit for it any more.

:class:`TransactionalWriter` is one such producer: records sent to it are held until
the next :meth:`~TransactionalWriter.commit`, which writes everything held so far in
one transaction (callers that commit at the same time share it). What Faust's own
consumer and table recovery need under transactions: :mod:`app.worker.read_committed`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from app.kafka import client_security, standalone_consumer

log = logging.getLogger(__name__)


Headers = list[tuple[str, bytes]] | None


class Named(Protocol):
    """A topic's writer (agents/app.py's ``Publisher``)."""

    def get_topic_name(self) -> str: ...

    async def send(
        self,
        *,
        key: bytes | None,
        value: bytes | str,
        partition: int | None = None,
        headers: Headers = None,
    ) -> asyncio.Future[Any]: ...


async def direct(
    to: Named, key: bytes | None, value: bytes | str, headers: Headers = None
) -> asyncio.Future[Any]:
    """The :data:`Sender` of at-least-once: the record goes to the broker now."""
    return await to.send(key=key, value=value, headers=headers)


#: Sends one record to a topic; returns the future of its delivery (or its commit).
Sender = Callable[[Named, bytes | None, bytes | str, Headers], Awaitable[asyncio.Future[Any]]]


class NotCommitted(RuntimeError):
    """A transaction was aborted (or its producer fenced): none of its records were written."""


@dataclass(slots=True)
class _Held:
    topic: str
    key: bytes | None
    value: bytes
    partition: int | None
    headers: list[tuple[str, bytes]] | None
    written: asyncio.Future[Any]


class TransactionalWriter:
    """One transactional producer; records are written in transactions at each commit."""

    def __init__(self, bootstrap: str, transactional_id: str, **options: Any) -> None:
        self.transactional_id = transactional_id
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=transactional_id,
            enable_idempotence=True,
            acks="all",
            **options,
            **client_security(),
        )
        self._held: list[_Held] = []
        self._lock = asyncio.Lock()
        #: Set once a commit failed: the producer may be fenced; the writer takes no more.
        self.failed: BaseException | None = None

    async def start(self) -> TransactionalWriter:
        """Start the producer: this fences a previous producer of the same transactional id
        and aborts its open transaction."""
        await self._producer.start()
        return self

    async def stop(self) -> None:
        async with self._lock:  # a commit under way ends first
            self.failed = self.failed or NotCommitted(f"{self.transactional_id} stopped")
        for held in self._held:
            if not held.written.done():
                held.written.set_exception(NotCommitted(f"{self.transactional_id} stopped"))
                held.written.exception()  # retrieved: whoever held them was told by a rebalance
        self._held.clear()
        await self._producer.stop()

    def sender(self) -> Sender:
        """A :data:`Sender` into this writer's next transaction."""

        async def send(
            to: Named, key: bytes | None, value: bytes | str, headers: Headers = None
        ) -> asyncio.Future[Any]:
            return self.send(to.get_topic_name(), key, value, None, headers)

        return send

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | str,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[Any]:
        """Hold a record for the next commit; the future is its metadata once committed."""
        data = value.encode() if isinstance(value, str) else value
        written: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.failed is not None:
            written.set_exception(NotCommitted(f"{self.transactional_id}: {self.failed!r}"))
        else:
            self._held.append(_Held(topic, key, data, partition, headers, written))
        return written

    async def commit(self) -> None:
        """Write every record held so far in one transaction; raise :class:`NotCommitted`
        if it was aborted (and then every later send fails too)."""
        async with self._lock:
            batch, self._held = self._held, []
            if not batch:
                return
            if self.failed is not None:
                raise self._fail(batch, self.failed)
            producer = self._producer
            sent: list[asyncio.Future[Any]] = []
            try:
                await producer.begin_transaction()
                for h in batch:
                    sent.append(
                        await producer.send(h.topic, h.value, h.key, h.partition, None, h.headers)
                    )
                await producer.commit_transaction()
            except asyncio.CancelledError as exc:  # a stop: the broker aborts it in time
                self.failed = exc
                self._fail(batch, exc, sent)
                raise
            except Exception as exc:
                self.failed = exc
                await self._abort()
                raise self._fail(batch, exc, sent) from exc
            for held, future in zip(batch, sent, strict=True):
                if not held.written.done():
                    held.written.set_result(future.result())

    def _fail(
        self, batch: list[_Held], problem: BaseException, sent: Sequence[asyncio.Future[Any]] = ()
    ) -> NotCommitted:
        """Fail the batch's records; return the error to raise."""
        for future in sent:  # the producer's own outcome of each, read (and dropped)
            if future.done() and not future.cancelled():
                future.exception()
        error = NotCommitted(f"{self.transactional_id}: {type(problem).__name__}")
        for held in batch:
            if not held.written.done():
                held.written.set_exception(error)
                held.written.exception()  # retrieved: callers may not wait on each
        return error

    async def _abort(self) -> None:
        try:
            await self._producer.abort_transaction()
        except Exception as exc:  # fenced: the broker aborts it for the new owner
            log.warning("%s: abort failed (%s)", self.transactional_id, type(exc).__name__)


class PartitionWriters:
    """A writer per partition this worker owns, for one role."""

    def __init__(
        self,
        make: Callable[[str], TransactionalWriter],
        prefix: str,
        owns: Callable[[int], bool] = lambda _: True,
    ) -> None:
        self._make = make
        self._prefix = prefix
        #: Whether this worker is assigned the partition now: only then is a writer
        #: started for it outside an assignment (it would fence the partition's owner).
        self._owns = owns
        self._writers: dict[int, TransactionalWriter] = {}
        self._starting: dict[int, asyncio.Future[TransactionalWriter]] = {}

    def transactional_id(self, partition: int) -> str:
        return f"{self._prefix}-{partition}"

    async def get(self, partition: int) -> TransactionalWriter:
        """The partition's writer; a new one if its last commit failed and this worker
        still owns the partition; :class:`NotCommitted` if it does not."""
        writer = self._writers.get(partition)
        if writer is not None and writer.failed is None:
            return writer
        if writer is None or not self._owns(partition):
            raise NotCommitted(f"{self.transactional_id(partition)}: not owned here")
        return await self.renew(partition)

    async def renew(self, partition: int) -> TransactionalWriter:
        """A new writer for the partition, started (which fences every earlier one of its
        transactional id) once the old one's commit under way has ended."""
        starting = self._starting.get(partition)
        if starting is None:
            starting = asyncio.ensure_future(self._replace(partition))
            self._starting[partition] = starting
            starting.add_done_callback(lambda _: self._starting.pop(partition, None))
        return await asyncio.shield(starting)

    async def _replace(self, partition: int) -> TransactionalWriter:
        old = self._writers.pop(partition, None)
        if old is not None:
            await old.stop()
        writer = await self._make(self.transactional_id(partition)).start()
        self._writers[partition] = writer
        return writer

    async def keep_only(self, partitions: set[int]) -> None:
        """Stop the writers of partitions this worker no longer owns."""
        for partition in [p for p in self._writers if p not in partitions]:
            await self._writers.pop(partition).stop()

    async def stop(self) -> None:
        await self.keep_only(set())


class CatchUp:
    """Per partition, where the routing log stood once this worker owned it: the hand-off
    makes no call of that partition before the router has folded that far."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._consumer: AIOKafkaConsumer | None = None
        #: partition -> end of its committed records when this worker took it (a future:
        #: measured once per assignment, by the first dispatch that needs it).
        self._ends: dict[int, asyncio.Future[int]] = {}

    def reset(self, partitions: set[int]) -> None:
        """A new assignment: measure those partitions again."""
        for partition in partitions:
            self._ends.pop(partition, None)

    async def end_of(self, partition: int) -> int:
        """The offset the router must fold up to (exclusive) before calls of ``partition``
        are made. Measured after this worker's producers of the partition were started
        (agents/exactly_once.py): no earlier owner commits past it."""
        end = self._ends.get(partition)
        if end is None:
            end = asyncio.ensure_future(self._measure(partition))
            self._ends[partition] = end
        try:
            return await asyncio.shield(end)
        except Exception:
            self._ends.pop(partition, None)
            raise

    def known_end(self, partition: int) -> int | None:
        """The end :meth:`end_of` measured for ``partition`` in this assignment, if it has
        (None: not measured yet, or the measure failed)."""
        end = self._ends.get(partition)
        if end is None or not end.done() or end.cancelled() or end.exception() is not None:
            return None
        return end.result()

    async def _measure(self, partition: int) -> int:
        consumer = await self._started()
        tp = TopicPartition(self._topic, partition)
        ends = await consumer.end_offsets([tp])  # read_committed: the last stable offset
        return int(ends[tp])

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = standalone_consumer(self._bootstrap, isolation_level="read_committed")
            await consumer.start()
            self._consumer = consumer
        return self._consumer

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
