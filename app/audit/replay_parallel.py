"""Replay on every core: independent routes folded in worker processes.

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

What every group needs. The policy book: every version the whole log carries, as
:func:`app.audit.replay.policy_book` builds it before folding (a route that has not
folded a ``policy.changed`` yet folds with the log's first version, wherever that
version's record is). Each worker gets the parent's book (its policies rebuilt from
their fields, without cached values) and the replay policy; each ``policy.changed``
is folded by its own route's group only (folded elsewhere it would make a state for
a route that group does not own).

The groups. One per key, each with its entries in log order; the groups are packed
into ``jobs`` chunks (largest first, each to the least loaded chunk) and each chunk
is one task. An entry goes to a worker as its record's text (``Entry.raw``, the text
its event was parsed from), its index in the log, partition and offset: the text
pickles as fast as a copy, where the parsed events' object graph costs more to
pickle and unpickle than the text costs to parse again (for 10,000 requests: 0.33 s
and 0.22 s against 0.02 s and 0.20 s). Unreadable entries stay in the parent
(counted there, folded nowhere, as in the serial replay).

The merge. A worker returns each re-derived record as ``(index, id, JSON, (partition,
offset))``, the JSON the router publishes (``model_dump_json``), in its fold order,
rather than the objects (which cost more to pickle and unpickle than to serialise
and compare as text). Every entry is
in one chunk, so sorting all of them by index (stably) is the serial replay's order,
records of one event in the order that event made them. States are put in the order
the serial fold first stored them (by the index of that event), fold errors in log
order. The comparison (:mod:`app.audit.replay`) then runs on these exactly as on the
serial replay's records: a recorded copy whose text is the re-derived JSON is that
record (JSON round-trips them exactly, as it does for the router's own records);
any other is parsed and compared field by field.

The pool uses the ``spawn`` start method: a worker is a fresh interpreter that
imports :mod:`app.audit.replay_worker` (the fold and the event contract; about 0.4 s),
never a copy of the parent's threads or broker connections. :class:`FoldPool` is a
context manager: leaving it stops every worker it started.

What it costs. The workers parse every record again and serialise every re-derived
record, which the serial replay does not (a quarter of its CPU time on the replay
bench), and the parent still finds each record's key, splits the log and compares
(about a tenth of the two-worker wall clock): two workers replay about 1.4 times as
fast as one process, and scale 1.8 times from one worker to two.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from operator import itemgetter
from types import TracebackType

from app.audit import replay_worker
from app.audit.log import Entry, RoutingEvent
from app.audit.replay_worker import Chunk, Folded, FoldTask, Made
from app.contract import AttemptFinished, RequestAccepted, route_of
from app.routing.book import PolicyBook
from app.routing.policy import Policy
from app.routing.state import RouteState

START_METHOD = "spawn"
#: The group of records that name no key (a budget ask whose index is past its scopes):
#: folding one raises before it touches any state, and the worker reports the error as
#: the serial replay does.
UNROUTABLE = "\x00unroutable"


def route_keys(entries: Sequence[Entry[RoutingEvent]]) -> list[str | None]:
    """Each entry's routing-log key, :func:`~app.contract.route_of` (None: unreadable,
    folded nowhere); the two common events' without a call."""
    keys: list[str | None] = []
    add = keys.append
    for entry in entries:
        event = entry.event
        if type(event) is RequestAccepted:
            add(event.route)
        elif type(event) is AttemptFinished:
            add(event.outcome.route)
        else:
            add(None if event is None else _key(event))
    return keys


def _key(event: RoutingEvent) -> str:
    try:
        return route_of(event)
    except Exception:  # its fold raises the same, in a worker
        return UNROUTABLE


def group_count(keys: Sequence[str | None]) -> int:
    return len({key for key in keys if key is not None})


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


def chunks(
    entries: Sequence[Entry[RoutingEvent]], keys: Sequence[str | None], planned: list[list[str]]
) -> list[Chunk]:
    """One chunk per planned list of keys: its entries' columns, in log order."""
    where = {key: number for number, members in enumerate(planned) for key in members}
    made = [Chunk([], [], [], []) for _ in planned]
    for index, (entry, key) in enumerate(zip(entries, keys, strict=True)):
        if key is None:
            continue
        chunk = made[where[key]]
        chunk.indices.append(index)
        chunk.partitions.append(entry.partition)
        chunk.offsets.append(entry.offset)
        chunk.raws.append(entry.raw)
    return made


def bare(policy: Policy) -> Policy:
    """The same policy without its cached values (rebuilt in the worker on first use)."""
    return replace(policy)


def bare_book(book: PolicyBook) -> PolicyBook:
    return PolicyBook(
        versions={v: bare(p) for v, p in book.versions.items()}, hashes=dict(book.hashes)
    )


class FoldPool:
    """``jobs`` worker processes for parallel replays; leaving the context stops them."""

    def __init__(self, jobs: int, method: str = START_METHOD) -> None:
        if jobs < 1:
            raise ValueError(f"jobs must be at least 1, not {jobs}")
        self.jobs = jobs
        #: The last parallel fold's figures (its ``Merged`` without the records).
        self.last: Merged | None = None
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
class Merged:
    """A parallel re-derivation, in the serial replay's order (see the module docstring)."""

    #: (index, id, JSON) of each re-derived decision / response, in log order.
    decisions: list[Made] = field(default_factory=list)
    responses: list[Made] = field(default_factory=list)
    states: dict[str, RouteState] = field(default_factory=dict)
    events: int = 0
    applied: int = 0
    skipped: int = 0
    unreadable: int = 0
    errors: list[str] = field(default_factory=list)
    #: Events per chunk and each worker's CPU seconds on it.
    chunk_events: list[int] = field(default_factory=list)
    worker_cpu_s: list[float] = field(default_factory=list)
    #: Parent wall seconds: building the chunks, waiting for the workers, merging.
    split_s: float = 0.0
    wait_s: float = 0.0
    merge_s: float = 0.0
    #: When each worker began its chunk, in seconds after the split.
    received_s: list[float] = field(default_factory=list)


def rederive_parallel(
    entries: Sequence[Entry[RoutingEvent]],
    policy: Policy,
    book: PolicyBook,
    pool: FoldPool,
    keys: Sequence[str | None] | None = None,
) -> Merged:
    """Fold ``entries`` (sorted by partition, offset) on ``pool``'s workers."""
    return start(entries, policy, book, pool, keys).merged()


@dataclass
class Running:
    """Chunks being folded; the parent does other work until :meth:`merged`."""

    pool: FoldPool
    calls: list[Future[Folded]]
    unreadable: int
    chunk_events: list[int]
    started: float
    split: float
    #: ``split`` as epoch seconds (the workers' clock).
    split_at: float

    def merged(self) -> Merged:
        folded = [call.result() for call in self.calls]
        waited = time.perf_counter()
        result = merge(folded)
        result.unreadable, result.chunk_events = self.unreadable, self.chunk_events
        result.split_s, result.wait_s = self.split - self.started, waited - self.split
        result.received_s = [part.received_at - self.split_at for part in folded]
        result.merge_s = time.perf_counter() - waited
        self.pool.last = replace(result, decisions=[], responses=[], states={}, errors=[])
        return result


def start(
    entries: Sequence[Entry[RoutingEvent]],
    policy: Policy,
    book: PolicyBook,
    pool: FoldPool,
    keys: Sequence[str | None] | None = None,
) -> Running:
    """Split ``entries`` (sorted by partition, offset) and send the chunks to the workers."""
    started = time.perf_counter()
    keys = route_keys(entries) if keys is None else keys
    made = chunks(entries, keys, plan(keys, pool.jobs))
    worker_policy, worker_book = bare(policy), bare_book(book)
    calls = pool.submit([FoldTask(worker_policy, worker_book, chunk) for chunk in made])
    return Running(
        pool,
        calls,
        unreadable=sum(1 for key in keys if key is None),
        chunk_events=[len(chunk.indices) for chunk in made],
        started=started,
        split=time.perf_counter(),
        split_at=time.time(),
    )


def merge(folded: Sequence[Folded]) -> Merged:
    """The workers' results in log order (each index is in exactly one of them)."""
    by_index = itemgetter(0)
    merged = Merged()
    for part in folded:
        merged.decisions.extend(part.decisions)
        merged.responses.extend(part.responses)
        merged.events += part.events
        merged.applied += part.applied
        merged.skipped += part.skipped
        merged.worker_cpu_s.append(part.cpu_s)
    merged.decisions.sort(key=by_index)
    merged.responses.sort(key=by_index)
    stored = sorted(
        (
            (part.stored_at[route], route, state)
            for part in folded
            for route, state in part.states.items()
        ),
        key=by_index,
    )
    merged.states = {route: state for _, route, state in stored}
    errors = sorted((error for part in folded for error in part.errors), key=by_index)
    merged.errors = [message for _, message in errors]
    return merged
