"""CPU time, scheduler wait and memory of a process, from ``/proc``; the load average."""

from __future__ import annotations

import os
import resource
from pathlib import Path


def parse_proc_stat_cpu_s(text: str, ticks_per_s: int) -> float:
    """utime + stime, in seconds, from the text of ``/proc/<pid>/stat``.

    The command name (field 2) is in parentheses and may hold spaces or
    parentheses itself, so fields are counted after the last ``)``: there the
    state is field 3, utime field 14 and stime field 15.
    """
    after = text[text.rindex(")") + 1 :].split()
    utime, stime = int(after[11]), int(after[12])
    return (utime + stime) / ticks_per_s


def parse_proc_status_kb(text: str, name: str) -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmHWM``, ``VmRSS``), or None when absent."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == name:
            number = value.split()
            return int(number[0]) if number else None
    return None


def parse_schedstat_wait_s(text: str) -> float:
    """Seconds spent runnable but waiting for a CPU, from ``/proc/<pid>/schedstat``
    (``run_ns wait_ns timeslices``; the process's main thread)."""
    return int(text.split()[1]) / 1e9


def process_wait_s(pid: int) -> float:
    try:
        return parse_schedstat_wait_s(Path(f"/proc/{pid}/schedstat").read_text(encoding="utf-8"))
    except (OSError, IndexError, ValueError):
        return 0.0


def process_cpu_s(pid: int) -> float:
    text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    return parse_proc_stat_cpu_s(text, os.sysconf("SC_CLK_TCK"))


def process_memory_mb(pid: int, name: str = "VmHWM") -> float | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return None
    kb = parse_proc_status_kb(text, name)
    return None if kb is None else kb / 1024.0


def self_cpu_s() -> float:
    """CPU seconds of this process, every thread (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3])
    except OSError:
        return "?"
