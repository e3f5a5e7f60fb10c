"""Processes that end when they should.

* Children that do not outlive the process that started them: the embedded broker,
  workers and mock servers are started by ``switchyard up``, the demo, the tests and the
  benches. If that process is killed (a CI timeout, Ctrl-C twice, a SIGKILL) before it
  could stop them, Linux kills them too: ``PR_SET_PDEATHSIG``.
* Children stopped for sure (``stop_process``, :class:`ChildProcess`): SIGTERM, SIGKILL
  past a timeout, a paused (SIGSTOPped) one continued first; a child server waited for
  until it listens (``wait_listening``).
* A hard deadline on stopping (``exit_after``): a worker told to stop exits within
  ``SWITCHYARD_SHUTDOWN_TIMEOUT_S`` even when its broker no longer answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Self

#: linux/prctl.h
PR_SET_PDEATHSIG = 1


class Started:
    """``with`` and ``async with`` for what ``start()`` starts and ``stop()`` stops (under
    ``async with`` the blocking calls run in a thread)."""

    def start(self) -> object:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)


class AsyncStarted:
    """``async with`` for what ``async start()`` starts and ``async stop()`` stops."""

    async def start(self) -> object:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


def stop_process(process: subprocess.Popen[bytes] | None, timeout_s: float = 20.0) -> None:
    """SIGTERM, and SIGKILL past ``timeout_s``; waits for it (a SIGSTOPped one is continued)."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGCONT)
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_listening(
    process: subprocess.Popen[bytes],
    host: str,
    port: int,
    timeout_s: float,
    *,
    name: str,
    poll_s: float = 0.05,
) -> None:
    """Return once ``process`` accepts TCP connections on ``host:port``. RuntimeError when
    it exits first, TimeoutError past ``timeout_s`` (left running); ``name`` says which."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with code {process.returncode}")
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(poll_s)
    raise TimeoutError(f"{name} did not listen on {host}:{port} within {timeout_s:g}s")


class ChildProcess(Started):
    """A :class:`Started` that is one child process (``_process``, set by ``start``):
    stopped with :func:`stop_process` within ``stop_timeout_s``; paused and resumed by
    signal (fault injection)."""

    stop_timeout_s = 20.0
    _process: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        stop_process(self._process, self.stop_timeout_s)
        self._process = None

    def pause(self) -> None:
        """SIGSTOP the process (fault injection)."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)


def die_with_parent() -> None:
    """``preexec_fn`` of a child: SIGKILL it when its parent dies (Linux; a no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


#: Exit code of a process that ``exit_after`` ended.
DEADLINE_EXIT_CODE = 3
_armed = threading.Lock()


def exit_after(seconds: float, reason: str, code: int = DEADLINE_EXIT_CODE) -> None:
    """End this process ``seconds`` from now, whatever its event loop is doing.

    A daemon thread, so a loop blocked in a call, or waiting on a broker that never
    answers, cannot hold it back; ``os._exit`` skips what could block again (atexit
    handlers, flushing). Armed once: later calls do nothing.
    """
    if not _armed.acquire(blocking=False):
        return

    def expire() -> None:
        with contextlib.suppress(OSError):
            os.write(2, f"switchyard: {reason}: exiting now\n".encode())
        os._exit(code)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.name = "switchyard-exit-deadline"
    timer.start()
