"""Children that do not outlive the process that started them.

The embedded broker, workers and mock servers are started by the demo, the
tests and the benches. If that process is killed (a CI timeout, Ctrl-C twice, a
SIGKILL) before it could stop them, Linux kills them too: ``PR_SET_PDEATHSIG``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import signal
import sys

#: linux/prctl.h
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn`` of a child: SIGKILL it when its parent dies (Linux; a no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
