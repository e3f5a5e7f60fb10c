"""Replay on every core: independent routes folded, and compared, in worker processes.

Why routes are independent. The driver (:class:`app.routing.driver.Driver`) keeps
everything it folds per routing-log key, ``route_of(event)``: a route's name, or a
budget's ledger (``budget:SCOPE``). Folding an event reads and writes that key's
:class:`~app.routing.state.RouteState` and its :class:`~app.routing.driver.Recall`
(the line's requests and the parked attempts' carriers, recalled from that key's
own events) and nothing else. What crosses keys in the live system crosses through
the log, as records the router sends, which come back as events of the other key:
a budget ask, verdict or settlement, a request forwarded to a fallback model or to
a dynamic route's target (``Step.records``, which replay does not re-derive: it
folds them where the log has them). A ``policy.changed`` is one record per route,
keyed by the route; it switches that route alone. So each key's states, decisions
and responses are a function of that key's events in log order, the replay policy
and the policy book, and nothing else. The pure caches the fold keeps
(:mod:`app.routing.propensity`, ``Policy.memo``, the trusted builders) are
functions of their arguments: a worker's cold cache gives the same numbers.

Each record parsed once, by the process that needs it. The parent reads the log as
texts (:mod:`app.audit.replay_source`: each routing-log record's key read from its
text, :mod:`app.audit.routing_scan`) and parses none of the common records. Here it
packs the keys into ``jobs`` chunks of about equal numbers of records (:func:`plan`:
largest first, each to the least loaded chunk); each chunk is one task
(:mod:`app.audit.replay_tasks`): the records' places (an export's byte ranges, which
the worker reads itself, or their texts), with each record's index in the log,
partition and offset. Each worker gets the parent's policy book (its policies rebuilt
from their fields, without cached values) and the replay policy; each
``policy.changed`` is folded by its own route's chunk only. The workers fold and
compare (:mod:`app.audit.replay_worker`); the parent puts their results together
(:mod:`app.audit.replay_merge`).

Checked, not assumed. A key read from a text is checked by the worker that parses it
(every record's key must be one of its chunk's), and so is every recorded id read from
a text's start; a record re-derived by two workers (two routes re-deriving one id) is
seen in what they send back. Any of these (a text laid out to mislead, a log no router
wrote) and the parent replays in one process instead (:func:`replay_parallel` returns
None): the same report, at one process's speed.

The pool uses the ``spawn`` start method: a worker is a fresh interpreter that
imports :mod:`app.audit.replay_worker` (the fold and the event contract; about 0.4 s),
never a copy of the parent's threads or broker connections. :class:`FoldPool` is a
context manager: leaving it stops every worker it started.
"""

from __future__ import annotations

import multiprocessing
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from app.audit import replay_worker
from app.audit.replay_fold import policy_book
from app.audit.replay_merge import merge
from app.audit.replay_report import ReplayReport
from app.audit.replay_source import AnyLog, Source, read_source, spooled
from app.audit.replay_tasks import Chunk, Folded, FoldTask, Records
from app.audit.routing_scan import RoutingScan
from app.contract import GradeApplied
from app.routing.book import PolicyBook
from app.routing.policy import Policy

START_METHOD = "spawn"


def replay_parallel(
    log: AnyLog,
    policy: Policy,
    allow_pending: bool,
    jobs: int = 1,
    pool: FoldPool | None = None,
) -> ReplayReport | None:
    """The replay with its keys folded in ``pool``'s workers (or, without one, in
    ``jobs`` workers started for it, one per key at most). None: replay it in one
    process (a log of one key, or one whose texts said a key or an id where the worker
    found another)."""
    started = time.perf_counter()
    source = read_source(log)
    groups = source.scan.groups()
    if (pool is None or groups < 2) and (pool is not None or min(jobs, groups) < 2):
        return None
    with ExitStack() as stack:
        spool = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="replay-")))
        source = spooled(source, spool)
        if pool is None:
            pool = stack.enter_context(FoldPool(min(jobs, groups)))
        return _run(source, policy, allow_pending, pool, started)


def _run(
    source: Source, policy: Policy, allow_pending: bool, pool: FoldPool, started: float
) -> ReplayReport | None:
    scan = source.scan
    book = policy_book(event for _, event in scan.special)
    grades = [event for _, event in scan.special if isinstance(event, GradeApplied)]
    made = chunks(scan, plan(scan.keys, pool.jobs))
    worker_policy, worker_book = bare(policy), bare_book(book)
    tasks = [
        FoldTask(worker_policy, worker_book, c, source.decisions, source.responses, bool(grades))
        for c in made
    ]
    calls = pool.submit(tasks)
    sent, sent_at = time.perf_counter(), time.time()
    folded = [call.result() for call in calls]
    waited = time.perf_counter()
    report = merge(source, policy, allow_pending, book, grades, folded)
    pool.last = Timings(
        split_s=sent - started,
        wait_s=waited - sent,
        merge_s=time.perf_counter() - waited,
        chunk_events=[len(c.indices) for c in made],
        worker_cpu_s=[part.cpu_s for part in folded],
        worker_fold_s=[part.fold_s for part in folded],
        received_s=[part.received_at - sent_at for part in folded],
        fell_back=report is None,
    )
    return report


def plan(keys: Sequence[str | None], jobs: int) -> list[list[str]]:
    """The keys packed into at most ``jobs`` chunks of about equal numbers of events:
    the largest group first, each to the chunk with the fewest events so far."""
    sizes: dict[str, int] = {}
    for key in keys:
        if key is not None:
            sizes[key] = sizes.get(key, 0) + 1
    count = min(jobs, len(sizes))
    loads = [0] * count
    planned: list[list[str]] = [[] for _ in range(count)]
    for key, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        number = min(range(count), key=lambda n: (loads[n], n))
        planned[number].append(key)
        loads[number] += size
    return planned


def chunks(scan: RoutingScan, planned: list[list[str]]) -> list[Chunk]:
    """One chunk per planned list of keys: its records' columns, in log order."""
    where = {key: number for number, members in enumerate(planned) for key in members}
    columns: list[tuple[list[int], list[int], list[int], list[Any], list[int], list[int]]] = [
        ([], [], [], [], [], []) for _ in planned
    ]
    texts = scan.texts
    for index, key in enumerate(scan.keys):
        if key is None:
            continue
        indices, partitions, offsets, kept, starts, ends = columns[where[key]]
        indices.append(index)
        partitions.append(scan.partitions[index])
        offsets.append(scan.offsets[index])
        if texts is not None:
            kept.append(texts[index])
        else:
            starts.append(scan.starts[index])
            ends.append(scan.ends[index])
    made = []
    for members, (indices, partitions, offsets, kept, starts, ends) in zip(
        planned, columns, strict=True
    ):
        records = (
            Records(texts=kept) if texts is not None else Records(None, scan.path, starts, ends)
        )
        made.append(Chunk(frozenset(members), indices, partitions, offsets, records))
    return made


def bare(policy: Policy) -> Policy:
    """The same policy without its cached values (rebuilt in the worker on first use)."""
    return replace(policy)


def bare_book(book: PolicyBook) -> PolicyBook:
    return PolicyBook(
        versions={v: bare(p) for v, p in book.versions.items()}, hashes=dict(book.hashes)
    )


# --------------------------------------------------------------------------- the pool


class FoldPool:
    """``jobs`` worker processes for parallel replays; leaving the context stops them."""

    def __init__(self, jobs: int, method: str = START_METHOD) -> None:
        if jobs < 1:
            raise ValueError(f"jobs must be at least 1, not {jobs}")
        self.jobs = jobs
        #: The last parallel replay's figures.
        self.last: Timings | None = None
        self._warming: list[Future[int]] = []
        self._executor = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=multiprocessing.get_context(method),
            initializer=replay_worker.ready,
        )

    def warm(self) -> None:
        """Start every worker now, without waiting (they import the fold meanwhile)."""
        if not self._warming:
            self._warming = [self._executor.submit(replay_worker.ready) for _ in range(self.jobs)]

    def start(self) -> list[int]:
        """Start every worker and wait until each has imported the fold: their pids."""
        self.warm()
        return [call.result() for call in self._warming]

    def submit(self, tasks: Sequence[FoldTask]) -> list[Future[Folded]]:
        """Each task to a worker; the results come in the tasks' order."""
        return [self._executor.submit(replay_worker.fold_chunk, task) for task in tasks]

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> FoldPool:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


@dataclass
class Timings:
    """Where a parallel replay's time went (the bench prints it)."""

    #: Parent wall seconds: reading the keys and sending the chunks, waiting for the
    #: workers, putting their results together.
    split_s: float = 0.0
    wait_s: float = 0.0
    merge_s: float = 0.0
    #: Records per chunk; each worker's CPU seconds, all of it and the fold alone.
    chunk_events: list[int] = field(default_factory=list)
    worker_cpu_s: list[float] = field(default_factory=list)
    worker_fold_s: list[float] = field(default_factory=list)
    #: When each worker began its chunk, in seconds after the chunks were sent.
    received_s: list[float] = field(default_factory=list)
    #: Replayed in one process after all (a key or an id not where its text said).
    fell_back: bool = False
