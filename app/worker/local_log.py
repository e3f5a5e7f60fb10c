"""The routing-log records this worker wrote, offered to its router before the broker
delivers them.

A request's record on the routing log is written by the ingest, and read back by the
router that owns its partition: one broker hop, which on a broker that holds fetches
(Tansu) costs about half the consumers' fetch wait. When the router that owns the
partition runs in the process that wrote the record (one worker, or the ingest's
worker owning the route's partition), it does not have to wait for that hop: the
broker's acknowledgement gives the record's partition and offset, and when every
earlier record of that partition is folded already, the record is the next one of the
log and can be folded at once, at its own position — the fold replay makes.

The broker's copy still comes: the router recognises it by its offset and only acks
it, once a written row includes it (the row is written, as always, only after the
sends it includes were acknowledged). A gap — a record of that partition another
process wrote, not read yet — stops the shortcut until the broker's copies fill it:
the records wait here, and are dropped once the broker delivered them. Nothing here
decides anything; it only moves a record's fold earlier, never out of order.

It also says which offset a partition's next record will have, when this worker can
foresee it (:meth:`LocalLog.next_offset`, for calls ahead: app/router/ahead.py).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

#: Records held per partition while a gap keeps them from being folded.
MAX_WAITING = 4096
#: Records folded from here per partition whose broker copy has not come yet, at most.
#: Only the copies write rows, so until they come every folded state stays in memory
#: (a 10,000-request burst on one worker: about 30 MB more at its peak). A bound met
#: early costs more than it saves: at 256 or 4,096 the burst drained at 254-407 ok/s
#: with 24-37 s of worker CPU and peaked at up to 253 MB, unbounded at 493-696 ok/s with
#: 14-19 s and 154-173 MB (`switchyard bench burst`, runs alternated). This one is a
#: guard against a much longer lag, not a setting.
MAX_AHEAD = 16_384


@dataclass
class LocalLog:
    #: Per routing partition this router reads: the offset of the last record it folded,
    #: whichever way the record came. A partition is known only once the broker delivered
    #: one of its records since the last rebalance.
    folded_through: dict[int, int] = field(default_factory=dict)
    #: Records acknowledged by the broker and not folded yet: partition -> offset -> value.
    waiting: dict[int, dict[int, bytes]] = field(default_factory=dict)
    #: Records folded from here whose broker copy has not come yet: (partition, offset) ->
    #: the route they belong to.
    folded_here: dict[tuple[int, int], str] = field(default_factory=dict)
    #: Per partition, how many of those: at ``max_ahead`` the fold waits for the broker's
    #: copies, which alone can write rows (and so let the router drop folded states).
    ahead: dict[int, int] = field(default_factory=dict)
    max_ahead: int = MAX_AHEAD
    #: The router's fold of a partition's records held here, run as a task when the
    #: partition's next record arrives (None: nothing is folded from here).
    fold: Callable[[int], Awaitable[None]] | None = None
    #: Whether this worker's consumer is assigned the partition now: a record of a
    #: partition just revoked may still come out of a stream's buffer.
    owns: Callable[[int], bool] = lambda _: True
    #: Per partition, when the broker last delivered a record another process wrote
    #: (monotonic seconds).
    foreign_at: dict[int, float] = field(default_factory=dict)
    _folding: set[int] = field(default_factory=set)
    _tasks: set[asyncio.Future[None]] = field(default_factory=set)

    def offer(self, partition: int, offset: int, value: bytes) -> None:
        """The broker acknowledged a routing-log record this process wrote."""
        through = self.folded_through.get(partition)
        if through is None or offset <= through:
            return  # not a partition this router reads now, or delivered already
        held = self.waiting.setdefault(partition, {})
        if len(held) >= MAX_WAITING:
            for stale in [o for o in held if o <= through]:  # acknowledged out of order
                del held[stale]
            if len(held) >= MAX_WAITING:
                return  # a long gap: the broker's copies will do
        held[offset] = value
        if offset == through + 1:
            self._start(partition)

    def _start(self, partition: int) -> None:
        if self.fold is None or partition in self._folding or not self.owns(partition):
            return  # a running fold takes this record too: it folds while records are here
        if self.ahead.get(partition, 0) >= self.max_ahead:
            return  # the broker's copies come first
        self._folding.add(partition)
        # In a context of its own: the acknowledgement's callback runs in the context of
        # whoever sent the record (the ingest's or the executor's event), and Faust reads
        # a table row from the partition of the current event, if there is one.
        task = asyncio.get_running_loop().create_task(
            self._run(self.fold, partition), context=contextvars.Context()
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, fold: Callable[[int], Awaitable[None]], partition: int) -> None:
        try:
            await fold(partition)
        finally:
            self._folding.discard(partition)

    def delivered(self, partition: int, offset: int) -> str | None:
        """The broker delivered this record: the route it was already folded for (only ack
        it), or None (fold it). Either way, it is the partition's newest record folded."""
        route = self.folded_here.pop((partition, offset), None)
        if route is not None:
            self.ahead[partition] -= 1
        through = max(offset, self.folded_through.get(partition, -1))
        self.folded_through[partition] = through
        held = self.waiting.get(partition)
        if held:
            _drop_through(held, offset)
            if through + 1 in held:  # a gap filled, or room again to fold ahead
                self._start(partition)
        return route

    def delivered_foreign(self, partition: int, now: float) -> None:
        """The broker delivered a record of ``partition`` another process wrote."""
        self.foreign_at[partition] = now

    def next_offset(self, partition: int, now: float, quiet_s: float) -> int | None:
        """The offset of the partition's next record, when this worker can tell it: it has
        folded every record of the partition it knows of, and no other process wrote
        there within ``quiet_s`` seconds (one may have a record on its way); else None.
        Whether this worker has a record of its own on the way is its writer's to say."""
        through = self.folded_through.get(partition)
        if through is None or self.waiting.get(partition):
            return None
        foreign = self.foreign_at.get(partition)
        if foreign is not None and now - foreign < quiet_s:
            return None
        return through + 1

    def next_record(self, partition: int) -> tuple[int, bytes] | None:
        """The partition's next record, when it is here."""
        through = self.folded_through.get(partition)
        held = self.waiting.get(partition)
        if through is None or not held or self.ahead.get(partition, 0) >= self.max_ahead:
            return None
        value = held.pop(through + 1, None)
        return None if value is None else (through + 1, value)

    def folded(self, partition: int, offset: int, route: str) -> None:
        """The record at ``offset`` was folded from here, for ``route``."""
        if partition not in self.folded_through:
            return  # a rebalance came during the fold: the broker's copy decides
        self.folded_through[partition] = offset
        self.folded_here[(partition, offset)] = route
        self.ahead[partition] = self.ahead.get(partition, 0) + 1

    def give_up(self, partition: int) -> None:
        """Folding from here failed: leave the partition's records to the broker's copies."""
        self.waiting.pop(partition, None)

    def forget(self) -> None:
        """Partitions moved: every partition is unknown until the broker delivers from it."""
        self.folded_through.clear()
        self.waiting.clear()
        self.folded_here.clear()
        self.ahead.clear()
        self.foreign_at.clear()


def _drop_through(held: dict[int, bytes], offset: int) -> None:
    """Drop the records at or below ``offset``: from the oldest held, as a partition's
    records are acknowledged in offset order (one acknowledged out of order stays until
    the partition is forgotten or the holding fills up, then is dropped)."""
    while held:
        oldest = next(iter(held))
        if oldest > offset:
            return
        del held[oldest]
