"""The worker's side of ``switchyard bench hops``: a clock on each stage of a request's way.

``bench hops`` starts the worker with :data:`SITE_DIR` first on its ``PYTHONPATH`` and
:data:`STAMPS_ENV` naming a directory; the ``sitecustomize`` there calls :func:`install`,
which wraps, as each module is imported, the functions a request passes through and
writes one line per passage (epoch seconds at µs resolution, what, which request) to a
file of that directory. Nothing of it is in the worker otherwise: the product pays for no
clock. The names it wraps are private (Faust's consumer thread, aiokafka's fetcher, the
agents' own steps): :data:`TARGETS` lists them, and tests/test_hop_clock.py fails when one
of them is gone or changed its parameters.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

#: The directory whose ``sitecustomize`` installs the clock in a worker.
SITE_DIR = Path(__file__).parent / "site"
#: The environment variable naming the directory the stamps are written to.
STAMPS_ENV = "SWITCHYARD_BENCH_HOP_STAMPS"

#: ``(module, attribute, parameters)`` of every function the clock wraps.
TARGETS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("aiokafka.consumer.fetcher", "PartitionRecords.__init__",
     ("self", "tp", "records", "aborted_transactions", "fetch_offset")),
    ("faust.transport.drivers.aiokafka", "AIOKafkaConsumerThread._fetch_records",
     ("self", "consumer", "active_partitions", "timeout", "max_records")),
    ("faust.transport.drivers.aiokafka", "AIOKafkaConsumerThread.getmany",
     ("self", "active_partitions", "timeout")),
    ("agents.ingest", "ingest_one", ("raw", "source", "when")),
    ("agents.handoff", "launch", ("dispatch", "partition")),
    ("agents.handoff", "call_ahead", ("dispatch", "partition")),
    ("agents.executor", "_call_in_time", ("dispatch",)),
    ("agents.executor", "_publish", ("sealed", "partition")),
)  # fmt: skip


class Stamps:
    """Lines ``epoch-seconds<TAB>what<TAB>field...``, from any thread."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()

    def __call__(self, what: str, *fields: object) -> None:
        line = "\t".join((f"{time.time():.6f}", what, *map(str, fields)))
        with self._lock:
            self._out.write(line + "\n")


def _request_id(raw: bytes | None) -> str:
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        return ""
    return str(value.get("request_id", "")) if isinstance(value, dict) else ""


def _fetcher(module: Any, stamp: Stamps) -> None:
    """A fetched partition's records, as aiokafka parses them (the consumer thread)."""
    cls: Any = module.PartitionRecords
    original = cls.__init__

    def init(self: Any, tp: Any, records: Any, aborted: Any, fetch_offset: int, *a: Any,
             **k: Any) -> None:  # fmt: skip
        stamp("fetched", tp.topic, tp.partition, fetch_offset)
        original(self, tp, records, aborted, fetch_offset, *a, **k)

    cls.__init__ = init


def _consumer_thread(module: Any, stamp: Stamps) -> None:
    """The records leaving Faust's consumer thread, and reaching the worker's main loop."""
    cls: Any = module.AIOKafkaConsumerThread
    fetch_records, getmany = cls._fetch_records, cls.getmany

    def first_offsets(what: str, records: dict[Any, Any]) -> None:
        for tp, batch in records.items():
            if batch:
                stamp(what, tp.topic, tp.partition, batch[0].offset)

    async def _fetch_records(self: Any, *args: Any, **kwargs: Any) -> Any:
        records = await fetch_records(self, *args, **kwargs)
        first_offsets("thread_returned", records)
        return records

    async def _getmany(self: Any, *args: Any, **kwargs: Any) -> Any:
        records = await getmany(self, *args, **kwargs)
        first_offsets("main_loop_got", records)
        return records

    cls._fetch_records, cls.getmany = _fetch_records, _getmany


def _ingest(module: Any, stamp: Stamps) -> None:
    original = module.ingest_one

    async def ingest_one(raw: bytes | None, source: Any, when: Any) -> Any:
        request_id = _request_id(raw)
        stamp("ingest", request_id, source.partition, source.offset)
        sent = await original(raw, source, when)
        stamp("routing_sent", request_id)
        sent.add_done_callback(lambda _: stamp("routing_acked", request_id))
        return sent

    module.ingest_one = ingest_one


def _handoff(module: Any, stamp: Stamps) -> None:
    """A call started by the router's fold (``launched``), or ahead of it
    (``launched_ahead``, app/router/ahead.py)."""
    launch_original, ahead_original = module.launch, module.call_ahead

    def launch(dispatch: Any, *args: Any, **kwargs: Any) -> Any:
        stamp("launched", dispatch.accepted.request.request_id)
        return launch_original(dispatch, *args, **kwargs)

    def call_ahead(dispatch: Any, *args: Any, **kwargs: Any) -> Any:
        stamp("launched_ahead", dispatch.accepted.request.request_id)
        return ahead_original(dispatch, *args, **kwargs)

    module.launch, module.call_ahead = launch, call_ahead


def _executor(module: Any, stamp: Stamps) -> None:
    call, publish = module._call_in_time, module._publish

    async def _call_in_time(dispatch: Any, *args: Any, **kwargs: Any) -> Any:
        request_id = dispatch.accepted.request.request_id
        stamp("call_started", request_id)
        result = await call(dispatch, *args, **kwargs)
        stamp("call_ended", request_id)
        return result

    async def _publish(sealed: Any, partition: int | None = None) -> None:
        stamp("publishing", sealed.outcome.request_id)
        await publish(sealed, partition)

    module._call_in_time, module._publish = _call_in_time, _publish


#: What to wrap in each module, once it is imported.
_WRAPPERS: dict[str, Callable[[Any, Stamps], None]] = {
    "aiokafka.consumer.fetcher": _fetcher,
    "faust.transport.drivers.aiokafka": _consumer_thread,
    "agents.ingest": _ingest,
    "agents.handoff": _handoff,
    "agents.executor": _executor,
}


class _Wrapping(importlib.abc.MetaPathFinder):
    """Finds a module of :data:`_WRAPPERS` as usual, then wraps it once it has run."""

    def __init__(self, stamp: Stamps) -> None:
        self._stamp = stamp

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        wrap = _WRAPPERS.get(fullname)
        if wrap is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        run, stamp = loader.exec_module, self._stamp

        def exec_module(module: ModuleType) -> None:
            run(module)
            wrap(module, stamp)

        loader.exec_module = exec_module
        return spec


def install(directory: str | Path) -> Path:
    """Wrap the :data:`TARGETS` of every module imported from now on; their stamps go to
    ``stamps-<pid>.tsv`` in ``directory`` (line-buffered)."""
    path = Path(directory) / f"stamps-{os.getpid()}.tsv"
    out = path.open("a", buffering=1, encoding="utf-8")
    sys.meta_path.insert(0, _Wrapping(Stamps(out)))
    return path
