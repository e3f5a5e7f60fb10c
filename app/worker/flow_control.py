"""Faust's flow control without dropping the records of a flow already running.

Faust stops the flow of records into the agents' streams when a rebalance starts
(``flow_control.suspend()`` and ``clear()``: the events still buffered belong to the
old assignment), and resumes it when the new assignment is recovered. Its
``FlowControlEvent.resume()`` also clears every stream's buffer, and Faust's recovery
calls it several times per rebalance (``faust/tables/recovery.py``): once when the
flow restarts, once more for the standby partitions, and once more at the end
(``on_recovery_completed``), after it has resumed the stream partitions and awaited the
seek to their committed offsets. By then the fetch loop runs again, so that last
``resume()`` empties buffers holding records of the new assignment, read after the
seek. Nothing reads them again: the fetch position has moved past them, and the
partition's later records are acked and committed beyond them. A request is lost
(tests/test_rebalance.py: one in 4 to 6 runs once a record reaches the buffer in fewer
loop turns; seen with a debug print in ``clear()`` naming the record dropped).

:class:`LiveFlowControl` clears the buffers only when the flow really resumes (from
suspended): a ``resume()`` while records flow changes nothing. The buffers still hold
nothing of an old assignment, since the suspension cleared them and nothing enters a
buffer while the flow is suspended. A record that reached a buffer before the seek is
read again after it: a duplicate, which every fold takes (at-least-once), not a loss.
"""

from __future__ import annotations

from mode.utils.queues import FlowControlEvent


class LiveFlowControl(FlowControlEvent):
    def resume(self) -> None:
        if self.is_active():
            return  # flowing already: the buffers hold this assignment's records
        super().resume()
