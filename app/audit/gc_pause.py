"""The cycle collector paused while reading or folding a recorded log.

Reading a log and folding it make no reference cycles (tests/test_gc_pause.py checks
both), so collecting finds nothing: it only walks the log's objects again and again
as they pile up. On a 10,000-request export that is
three quarters of the read's time and a third of the fold's. Reference counting
still frees everything as usual.

What was made and kept (entries, decisions, states) then goes straight to the oldest
generation (``freeze`` + ``unfreeze``): left young, the first allocation after
``enable`` would walk all of it once more to find nothing. Skipped when something
else keeps objects frozen (``unfreeze`` would let them go).

The pause is process-wide: hold it only around code that does not wait (no
``await`` inside), so a live process's other tasks are never left without it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
