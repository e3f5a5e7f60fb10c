"""Clean lifecycle: stops within 10 s whatever the broker does, no orphans.

* ``switchyard up``: SIGTERM stops broker, providers, gateway and worker within 10 s;
  SIGKILL leaves no process of its own behind; it prints ``web=`` beside ``broker=``.
* ``switchyard demo``: SIGINT stops everything within 10 s.
* A worker exits promptly and cleanly on SIGTERM, and within 10 s with its broker
  SIGSTOPped (the hard deadline, ``SWITCHYARD_SHUTDOWN_TIMEOUT_S``).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import httpx
import pytest
from up_helpers import Command, descendants, wait_gone, wait_ready

from app.embedded.stack import EmbeddedStack, Worker
from app.lifetime import DEADLINE_EXIT_CODE
from app.settings import Settings

pytestmark = pytest.mark.broker
#: What the lifecycle requirement allows between the signal and the last process gone.
STOP_BUDGET_S = 10.0


@pytest.fixture
def up() -> Iterator[tuple[Command, str]]:
    """A running ``switchyard up`` whose worker is ready, and its worker's web URL."""
    command = Command("up")
    try:
        command.wait_for("worker running")
        (web,) = [line.removeprefix("web=") for line in command.lines if line.startswith("web=")]
        broker_at = command.lines.index(next(x for x in command.lines if x.startswith("broker=")))
        assert command.lines[broker_at + 1] == f"web={web}"  # beside broker=
        wait_ready(web)
        yield command, web
    finally:
        command.kill()


def test_up_stops_everything_within_10s_of_sigterm(up: tuple[Command, str]) -> None:
    command, web = up
    assert httpx.get(f"{web}/healthz", timeout=2).json() == {"status": "ok"}
    children = descendants(command.process.pid)
    assert len(children) >= 2  # the broker and the worker at least
    signalled = time.monotonic()
    command.process.send_signal(signal.SIGTERM)
    command.process.wait(timeout=STOP_BUDGET_S + 5)
    took = time.monotonic() - signalled
    assert command.process.returncode == 0, command.lines[-20:]
    assert took <= STOP_BUDGET_S, f"up took {took:.1f}s to stop"
    assert wait_gone(children, signalled + STOP_BUDGET_S) == set()


def test_up_sigkilled_leaves_no_process_behind(up: tuple[Command, str]) -> None:
    command, _ = up
    children = descendants(command.process.pid)
    assert len(children) >= 2
    command.process.kill()  # no chance to stop anything
    command.process.wait()
    assert wait_gone(children, time.monotonic() + 5) == set()


def test_demo_stops_everything_within_10s_of_sigint() -> None:
    command = Command("demo", "--requests", "100000", "--rate", "20")
    try:
        command.wait_for("publishing")
        children = descendants(command.process.pid)
        assert len(children) >= 2
        signalled = time.monotonic()
        command.process.send_signal(signal.SIGINT)
        command.process.wait(timeout=STOP_BUDGET_S + 5)
        assert time.monotonic() - signalled <= STOP_BUDGET_S
        assert wait_gone(children, signalled + STOP_BUDGET_S) == set()
    finally:
        command.kill()


def stop_timed(worker: Worker) -> float:
    assert worker.process is not None
    signalled = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    worker.process.wait(timeout=30)
    return time.monotonic() - signalled


async def test_a_worker_exits_within_10s_of_sigterm_even_with_its_broker_stopped() -> None:
    # The production deadline, not the embedded stack's shorter one.
    deadline_s = Settings.model_fields["shutdown_timeout_s"].default
    env = {"SWITCHYARD_SHUTDOWN_TIMEOUT_S": str(deadline_s)}
    stack = EmbeddedStack(time_scale=0.05, seed=1, env=env)  # its own broker, to SIGSTOP
    await stack.start()
    try:
        healthy = stack.workers[0]
        wait_ready(healthy.web_url)
        took = stop_timed(healthy)
        assert healthy.process is not None and healthy.process.returncode == 0
        assert took < deadline_s  # a clean stop, not the deadline
        stranded = stack.add_worker()
        wait_ready(stranded.web_url)
        stack.broker.pause()  # SIGSTOP: connections open, nothing answers
        try:
            took = stop_timed(stranded)
        finally:
            stack.broker.resume()
        assert took <= STOP_BUDGET_S, f"the worker took {took:.1f}s"
        assert stranded.process is not None
        assert stranded.process.returncode in (0, DEADLINE_EXIT_CODE)
    finally:
        await stack.stop()
