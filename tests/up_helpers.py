"""Helpers for tests that run ``switchyard`` commands (``up``, ``demo``) as child processes:
their output lines, their process tree and the TCP sockets it listens on."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead
    except FileNotFoundError:
        return False


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def wait_gone(pids: set[int], until: float) -> set[int]:
    """The pids still alive at ``until`` (monotonic), or none as soon as all are gone."""
    while time.monotonic() < until:
        if not any(alive(pid) for pid in pids):
            return set()
        time.sleep(0.05)
    return {pid for pid in pids if alive(pid)}


class Command:
    """A ``switchyard`` command with its output lines collected as they come.

    It runs without the ``SWITCHYARD_*`` variables of the calling shell, plus ``env``.
    """

    def __init__(self, *args: str, env: Mapping[str, str] | None = None) -> None:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", *args],
            cwd=ROOT, env={**clean, **(env or {})}, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.lines: list[str] = []
        self._new_line = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._new_line:
                self.lines.append(line.rstrip("\n"))
                self._new_line.notify_all()
        with self._new_line:
            self._new_line.notify_all()

    def wait_for(self, prefix: str, timeout_s: float = 90.0) -> str:
        """The first line starting with ``prefix``, as soon as it is printed."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        with self._new_line:
            while True:
                for line in self.lines[seen:]:
                    if line.startswith(prefix):
                        return line
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    break
                self._new_line.wait(timeout=min(left, 0.2))
        pytest.fail(f"no {prefix!r} line: {self.lines[-30:]}")

    def value(self, name: str) -> str:
        """What follows ``name=`` on the line printed for it."""
        return self.wait_for(f"{name}=").removeprefix(f"{name}=")

    def exited(self, timeout_s: float = 60.0) -> int:
        """Its return code once it has exited by itself (stopped past ``timeout_s``) and
        the reader thread has its last lines."""
        try:
            self.process.wait(timeout=timeout_s)
        finally:
            self.stop()
        time.sleep(0.2)  # the reader thread's last lines
        return self.process.returncode

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM, then wait (SIGKILL past ``timeout_s``)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout_s)
        self.kill()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def wait_ready(url: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"{url}/readyz never answered 200")


def accepts(url: str) -> bool:
    """Whether the server of ``url`` (``http://HOST:PORT...`` or ``HOST:PORT``) accepts a
    TCP connection now (one try)."""
    where = urlsplit(url if "//" in url else f"//{url}")
    assert where.hostname is not None and where.port is not None, url
    try:
        socket.create_connection((where.hostname, where.port), timeout=2).close()
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket: its local address and port, and the process holding it."""

    host: str
    port: int
    pid: int

    @property
    def wildcard(self) -> bool:
        return ipaddress.ip_address(self.host).is_unspecified


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except (FileNotFoundError, PermissionError):
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def _address(hex_address: str) -> tuple[str, int]:
    """``/proc/net/tcp{,6}``'s ``local_address``: hex address (host byte order per 32-bit
    word) and hex port."""
    hex_host, hex_port = hex_address.split(":")
    raw = bytes.fromhex(hex_host)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words)), int(hex_port, 16)


def listeners(pids: Iterable[int]) -> list[Listener]:
    """The LISTEN sockets (``/proc/net/tcp`` and ``tcp6``) held by ``pids``."""
    owner = {inode: pid for pid in pids for inode in _socket_inodes(pid)}
    found: list[Listener] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as rows:
            next(rows)  # the header
            for row in rows:
                fields = row.split()
                inode = int(fields[9])
                if fields[3] == "0A" and inode in owner:  # 0A: TCP_LISTEN
                    host, port = _address(fields[1])
                    found.append(Listener(host, port, owner[inode]))
    return sorted(found, key=lambda x: (x.port, x.host))


def process_name(pid: int) -> str:
    """A process's command line, shortened, for a report."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            words = cmdline.read().split(b"\0")
    except FileNotFoundError:
        return "?"
    return " ".join(Path(w.decode()).name if i == 0 else w.decode() for i, w in enumerate(words))[
        :80
    ]
