"""Nothing the tests, the demo or a bench start outlives them, even when killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from app.lifetime import DEADLINE_EXIT_CODE

pytestmark = pytest.mark.broker

STARTER = """
import sys, time
from app.embedded.broker import EmbeddedBroker
broker = EmbeddedBroker().start()
print(broker._process.pid, flush=True)
time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().split()[2] != "Z"  # a zombie is dead, waiting to be reaped


def test_a_broker_dies_with_the_process_that_started_it() -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    broker_pid = int(starter.stdout.readline())
    assert alive(broker_pid)
    starter.send_signal(signal.SIGKILL)  # no chance to stop it
    starter.wait()
    deadline = time.monotonic() + 5
    while alive(broker_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(broker_pid)


BLOCKED = """
import threading, time
from app.lifetime import exit_after
exit_after(0.3, "test deadline")
exit_after(60, "a second call changes nothing")
threading.Event().wait()  # blocked for good, as a loop waiting on a stopped broker
"""


def test_exit_after_ends_a_blocked_process_at_its_deadline() -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED], capture_output=True, text=True, timeout=30
    )
    took = time.monotonic() - started
    assert done.returncode == DEADLINE_EXIT_CODE
    assert "switchyard: test deadline: exiting now" in done.stderr
    assert took < 5
