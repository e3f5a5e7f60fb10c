"""Acks in offset order, per partition: an event is acked only after every earlier one.

Agents that ack by hand finish events out of order: the router writes a route's
row (and acks its events) while another route of the same partition still waits
for its sends, and the hand-off acks a dispatch when its call ends. Faust commits
the first run of consecutive acked offsets and checks for a gap in front of it
one offset too late (``Consumer._new_offset`` in faust-streaming 0.11: committed
31, acked 32..40 commits 41): one unacked event just after the committed offset
is skipped. A rebalance or a kill before that event is acked then loses it for
good: its partition's next owner starts after it (``tests/test_rebalance.py``
lost requests that way).

:class:`InOrderAcks` holds an event's ack back until every event received
before it on its partition is done, so a committed offset never passes an event
that is still in flight.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

#: (topic, partition)
Partition = tuple[str, int]


def partition_of(event: Any) -> Partition:
    return (event.message.topic, event.message.partition)


@dataclass
class _Line:
    """The events of one partition received and not acked yet, in offset order."""

    offsets: deque[int] = field(default_factory=deque)
    events: dict[int, Any] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)


class InOrderAcks:
    def __init__(self, ack: Callable[[Any], Awaitable[Any]]) -> None:
        self._ack = ack
        self._lines: dict[Partition, _Line] = {}

    def received(self, event: Any) -> None:
        """Call for each event as the stream yields it, before it is worked on."""
        line = self._lines.setdefault(partition_of(event), _Line())
        offset = int(event.message.offset)
        if line.offsets and offset <= line.offsets[-1]:
            # The partition is read again from its committed offset (a rebalance):
            # what was held belongs to the old reading and is redelivered.
            self._lines[partition_of(event)] = line = _Line()
        line.offsets.append(offset)
        line.events[offset] = event

    async def done(self, event: Any) -> None:
        """``event`` may be acked: ack it and the held events after it that are done."""
        line = self._lines.get(partition_of(event))
        offset = int(event.message.offset)
        if line is None or line.events.get(offset) is not event:
            return  # an event of a reading that a rebalance ended: redelivered, not acked
        line.done.add(offset)
        while line.offsets and line.offsets[0] in line.done:
            head = line.offsets.popleft()
            line.done.discard(head)
            await self._ack(line.events.pop(head))

    def forget(self) -> None:
        """Partitions were revoked: held events will be redelivered, here or elsewhere."""
        self._lines.clear()

    def held(self) -> int:
        return sum(len(line.offsets) for line in self._lines.values())
