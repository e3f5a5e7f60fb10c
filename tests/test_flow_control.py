"""A rebalance's recovery resumes the flow several times; the records already flowing
into the streams' buffers survive it (app/worker/flow_control.py)."""

from __future__ import annotations

from mode.utils.queues import FlowControlEvent, FlowControlQueue

from app.worker.flow_control import LiveFlowControl


def _recovery(flow: FlowControlEvent) -> list[str]:
    """What Faust does to a stream's buffer across a rebalance (faust/app/base.py and
    faust/tables/recovery.py), and what is left in it: records read once the flow resumed
    must stay until the stream takes them."""
    buffer: FlowControlQueue[str] = FlowControlQueue(flow_control=flow, clear_on_resume=True)
    flow.resume()  # the worker's first assignment is recovered
    buffer.put_nowait("old assignment")
    flow.suspend()  # partitions revoked: the old assignment's records go
    flow.clear()
    flow.resume()  # recovery restarts the flow (changelogs, standbys)
    buffer.put_nowait("read after the seek")  # the fetch loop runs again
    flow.resume()  # on_recovery_completed, after the seek to committed offsets
    return list(buffer._queue)  # type: ignore[attr-defined]


def test_faust_s_flow_control_drops_a_running_flow_s_records() -> None:
    assert _recovery(FlowControlEvent(initially_suspended=True)) == []  # what must not happen


def test_a_resume_while_records_flow_keeps_them() -> None:
    assert _recovery(LiveFlowControl(initially_suspended=True)) == ["read after the seek"]


def test_a_resume_from_suspended_still_clears_the_buffers() -> None:
    flow = LiveFlowControl(initially_suspended=True)
    buffer: FlowControlQueue[str] = FlowControlQueue(flow_control=flow, clear_on_resume=True)
    flow.resume()
    buffer.put_nowait("before the suspension")
    flow.suspend()
    flow.resume()
    assert buffer.empty() and flow.is_active()


def test_the_worker_uses_it() -> None:
    from agents.app import app

    assert isinstance(app.flow_control, LiveFlowControl)
