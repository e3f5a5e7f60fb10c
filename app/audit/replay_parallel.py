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
texts (:mod:`app.audit.log_texts`) and parses none of the common records: it reads each
routing-log record's key from its text (:func:`~app.audit.record_keys.guess_key`: where
the router's JSON puts it) and parses only the records it needs itself (policy changes,
for the book; grades, for their check) and those whose text it cannot read a key from.
It packs the keys into ``jobs`` chunks of about equal numbers of records (largest first,
each to the least loaded chunk); each chunk is one task: the records' places (an
export's byte ranges, which the worker reads itself, or their texts), with each record's
index in the log, partition and offset. Each worker gets the parent's policy book (its
policies rebuilt from their fields, without cached values) and the replay policy; each
``policy.changed`` is folded by its own route's chunk only.

The comparison in the workers (:mod:`app.audit.replay_worker`,
:mod:`app.audit.replay_compare`). A worker parses and folds its records, then reads
every recorded decision and response and compares those whose id it re-derived, as the
one-process replay compares them. It sends back counts, the mismatches, the final states
and which recorded records it took: no record. What no worker took (recorded but
re-derived nowhere, or unreadable) the parent parses: the recorded-but-not-re-derived
mismatches. Each mismatch comes with its rank among those of its kind and origin in the
one-process replay's order (its id's first recorded copy, or the event that first
re-derived it), so sorting them all gives that order; states go in the order the serial
fold first stored them, fold errors and grades in log order.

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

import mmap
import multiprocessing
import operator
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from itertools import accumulate, chain, repeat
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from pydantic import ValidationError

from app.audit import replay_worker
from app.audit.grades import GradeCheck, check_grade_events
from app.audit.log import STREAMS, Entry, RecordedLog
from app.audit.log_texts import ExportTexts, LogTexts, UnreadableLog, has_carriage_return
from app.audit.mismatch import KIND_ORDER, advance, mismatch, pending
from app.audit.record_keys import ROUTING_RECORD, guess_key, key_of, plain, text_id
from app.audit.replay_fold import policy_book, versions_of
from app.audit.replay_report import ReplayReport
from app.audit.replay_tasks import Chunk, Compared, Folded, FoldTask, Records, Stream, Tally
from app.contract import (
    AttemptFinished,
    Decision,
    GradeApplied,
    PolicyChanged,
    RequestAccepted,
    Response,
)
from app.routing.book import PolicyBook
from app.routing.keys import KeyState
from app.routing.policy import Policy

START_METHOD = "spawn"
#: Bytes written at once to a spool file (texts of about a kilobyte each, one by one).
SPOOL_BUFFER = 1 << 20
R = TypeVar("R", Decision, Response)
#: A parsed, a read-as-texts or an export-directory log.
AnyLog = RecordedLog | LogTexts | ExportTexts


# --------------------------------------------------------------------------- the keys


@dataclass
class RoutingScan:
    """The routing log as the parent reads it: each record's key, place and text."""

    #: Each record's key, in log order (None: unreadable, folded nowhere).
    keys: list[str | None] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    #: The records' texts (as bytes, or as a parsed log's strings), or (``path``) where
    #: each is in a file.
    texts: list[bytes] | None = None
    strings: list[str] | None = None
    path: str | None = None
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    #: (index, event) of the policy changes and grades, parsed here, in log order.
    special: list[tuple[int, PolicyChanged | GradeApplied]] = field(default_factory=list)
    unreadable: int = 0

    def groups(self) -> int:
        return len({key for key in self.keys if key is not None})


def _keyed(scan: RoutingScan, text: bytes, key: str | None) -> str | None:
    """``key`` when the text gave one; else the record parsed here (None: unreadable)."""
    if key is not None:
        return key
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnreadableLog(f"a routing-log record is not UTF-8: {exc}") from None
    try:
        event = ROUTING_RECORD.validate_json(text)
    except ValidationError:
        scan.unreadable += 1
        return None
    if isinstance(event, PolicyChanged | GradeApplied):
        scan.special.append((len(scan.keys), event))
    return key_of(event)


def scan_entries(log: RecordedLog) -> RoutingScan:
    """A parsed log's keys (from its events); its texts are the entries' ``raw``."""
    scan = RoutingScan(strings=[entry.raw for entry in log.routing])
    for index, entry in enumerate(log.routing):
        event = entry.event
        scan.partitions.append(entry.partition)
        scan.offsets.append(entry.offset)
        if event is None:
            scan.keys.append(None)
            scan.unreadable += 1
            continue
        if type(event) is RequestAccepted:
            scan.keys.append(event.route)
        elif type(event) is AttemptFinished:
            scan.keys.append(event.outcome.route)
        else:
            if isinstance(event, PolicyChanged | GradeApplied):
                scan.special.append((index, event))
            scan.keys.append(key_of(event))
    return scan


def scan_texts(texts: LogTexts) -> RoutingScan:
    """Keys read from the texts (:func:`guess_key`)."""
    scan = RoutingScan(texts=[])
    assert scan.texts is not None
    for partition, offset, text in texts.routing:
        key = guess_key(text, 0, len(text))
        scan.keys.append(_keyed(scan, text, key))
        scan.partitions.append(partition)
        scan.offsets.append(offset)
        scan.texts.append(text)
    return scan


#: A line of ``routing.jsonl`` as :mod:`app.audit.export` writes it, up to its event's key
#: when the event is an attempt (group 3) or up to its type when it is a request (4).
_LINE = re.compile(
    rb'\{"partition":(\d+),"offset":(\d+),"event":(?:\{"id":"[^"]*","schema_version":\d+,'
    rb'"occurred_at":"[^"]*","type":"(?:attempt\.finished","outcome":\{"id":"[^"]*",'
    rb'"schema_version":\d+,"occurred_at":"[^"]*","type":"attempt\.outcome",'
    rb'"request_id":"(?:[^"\\]|\\.)*","attempt":\d+,"route":"([^"\\]*)"|(request\.accepted)"))?'
)


def scan_export(path: Path) -> RoutingScan | None:
    """Keys and byte ranges of an export's routing records, read from ``routing.jsonl``
    without parsing it; None when a line is laid out otherwise than
    :func:`app.audit.export.write_export` writes it (the export is then read parsed).

    One regular expression finds every line and reads the two common events' keys
    where :func:`guess_key` reads them (the loop runs once per record: every call it
    saves counts); any other event goes through :func:`guess_key`."""
    with path.open("rb") as file:
        if file.seek(0, 2) == 0:
            return RoutingScan(path=str(path))
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return None if data.find(b"\r") >= 0 else _scan_export(data, str(path))


def _scan_export(data: mmap.mmap, path: str) -> RoutingScan | None:
    scan = RoutingScan(path=path)
    keys, partitions, offsets = scan.keys, scan.partitions, scan.offsets
    starts, ends = scan.starts, scan.ends
    named: dict[bytes, str | None] = {}  # a key's bytes -> the key (None: has an escape)
    find, rfind = data.find, data.rfind
    size, at = len(data), 0
    for line in _LINE.finditer(data):
        if line.start() != at and data[at : line.start()].strip(b"\n"):
            return None  # a line laid out otherwise
        end = find(b"\n", line.end())
        if end < 0:
            end = size
        if data[end - 1] != 0x7D:  # "}"
            return None
        partition, offset, route, request = line.groups()
        start, stop = line.start() + 32 + len(partition) + len(offset), end - 1
        if request is not None:
            sha = rfind(b'","prompt_sha256":"', start, stop)
            found = rfind(b',"route":"', start, sha) if sha >= 0 else -1
            route = data[found + 10 : sha] if found >= 0 else None
        key: str | None = None
        if route is not None:
            key = named[route] if route in named else named.setdefault(route, plain(route))
        if key is None:
            text = data[start:stop]
            if text == b"null":  # unreadable when it was exported
                scan.unreadable += 1
            else:
                key = _keyed(scan, text, guess_key(text, 0, len(text)))
        keys.append(key)
        partitions.append(int(partition))
        offsets.append(int(offset))
        starts.append(start)
        ends.append(stop)
        at = end + 1
    if at < size and data[at:].strip(b"\n"):
        return None
    _in_log_order(scan)
    return scan


def _in_log_order(scan: RoutingScan) -> None:
    """Records sorted by partition, then offset (as :func:`~app.audit.log.read_export`
    sorts them; a file :mod:`app.audit.export` wrote already is)."""
    places = list(zip(scan.partitions, scan.offsets, strict=True))
    if all(map(operator.le, places, places[1:])):
        return
    order = sorted(range(len(places)), key=places.__getitem__)
    moved = {old: new for new, old in enumerate(order)}
    scan.keys = [scan.keys[i] for i in order]
    scan.partitions = [scan.partitions[i] for i in order]
    scan.offsets = [scan.offsets[i] for i in order]
    scan.starts = [scan.starts[i] for i in order]
    scan.ends = [scan.ends[i] for i in order]
    scan.special = sorted((moved[i], event) for i, event in scan.special)


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


# --------------------------------------------------------------------------- the replay


@dataclass
class _Source:
    """What the parent reads of a log before the workers start."""

    source: str
    scan: RoutingScan
    decisions: Stream
    responses: Stream
    #: The recorded texts by position (the parent parses those no worker took).
    decision_texts: Callable[[], Sequence[bytes]]
    response_texts: Callable[[], Sequence[bytes]]
    feedback: list[Entry[Any]]
    routing_start: dict[int, int]
    unreadable_outcomes: int = 0
    #: A parsed log's decision and response texts (``decisions`` and ``responses`` are
    #: made of them when the workers are about to start).
    strings: tuple[list[str], list[str]] | None = None


def _lines(path: Path | None) -> Callable[[], Sequence[bytes]]:
    def read() -> Sequence[bytes]:
        return [] if path is None else path.read_bytes().split(b"\n")

    return read


def _source(log: AnyLog) -> _Source | None:
    """None: an export whose files are laid out otherwise (read it parsed instead)."""
    if isinstance(log, ExportTexts):
        routing, decided, answered = (log.path(n) for n in ("routing", "decisions", "responses"))
        if any(has_carriage_return(p) for p in (decided, answered) if p is not None):
            return None
        scan = RoutingScan() if routing is None else scan_export(routing)
        if scan is None:
            return None
        return _Source(
            log.source,
            scan,
            Stream(path=None if decided is None else str(decided)),
            Stream(path=None if answered is None else str(answered)),
            _lines(decided),
            _lines(answered),
            log.feedback,
            log.routing_start,
        )
    if isinstance(log, RecordedLog):
        parsed = log
        return _Source(
            log.source,
            scan_entries(log),
            Stream(),
            Stream(),
            lambda: [entry.raw.encode("utf-8") for entry in parsed.decisions],
            lambda: [entry.raw.encode("utf-8") for entry in parsed.responses],
            log.feedback,
            log.routing_start,
            log.unreadable()["outcomes"],
            ([entry.raw for entry in log.decisions], [entry.raw for entry in log.responses]),
        )
    decisions = [text for _, _, text in log.decisions]
    responses = [text for _, _, text in log.responses]
    return _Source(
        log.source,
        scan_texts(log),
        Stream(texts=decisions),
        Stream(texts=responses),
        lambda: decisions,
        lambda: responses,
        log.feedback,
        log.routing_start,
        log.unreadable_outcomes,
    )


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
    source = _source(log)
    if source is None:
        assert isinstance(log, ExportTexts)
        source = _source(log.parsed())
        assert source is not None
    groups = source.scan.groups()
    if (pool is None or groups < 2) and (pool is not None or min(jobs, groups) < 2):
        return None
    with ExitStack() as stack:
        spool = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="replay-")))
        source = _spooled(source, spool)
        if pool is None:
            pool = stack.enter_context(FoldPool(min(jobs, groups)))
        return _run(source, policy, allow_pending, pool, started)


def _spooled(source: _Source, spool: Path) -> _Source:
    """Texts held in memory written once to files in ``spool``, which each worker reads
    itself: sent in the tasks, every worker's copy would be pickled, pushed through a
    pipe and unpickled, one worker after the other (half a second for 20,000 requests).
    A recorded stream goes line by line, as an export's does, unless one of its texts is
    empty or spans lines (it is then sent). Written text by text: joined first, the
    copies alone cost more than the writing (fresh memory, page by page)."""
    scan = source.scan
    if scan.texts is not None or scan.strings is not None:
        path = spool / "routing"
        if scan.texts is not None:
            texts: Iterable[bytes] = scan.texts
            sizes: Iterable[int] = map(len, scan.texts)
        else:
            assert scan.strings is not None
            texts = map(str.encode, scan.strings)
            ascii = all(map(str.isascii, scan.strings))
            sizes = map(len, scan.strings if ascii else map(str.encode, scan.strings))
        with path.open("wb", buffering=SPOOL_BUFFER) as file:
            file.writelines(texts)
        scan.ends = list(accumulate(sizes))
        scan.starts = [0, *scan.ends[:-1]]
        scan.path, scan.texts, scan.strings = str(path), None, None
    if source.strings is not None:
        decided, answered = source.strings
        decisions = _spool(decided, spool / "decisions")
        responses = _spool(answered, spool / "responses")
    else:
        decisions, responses = source.decisions, source.responses
        if decisions.texts is not None:
            decisions = _spool(decisions.texts, spool / "decisions")
        if responses.texts is not None:
            responses = _spool(responses.texts, spool / "responses")
    return replace(source, decisions=decisions, responses=responses, strings=None)


def _spool(texts: Sequence[bytes] | Sequence[str] | None, path: Path) -> Stream:
    """The texts as the lines of a file (or, when one of them is empty or spans lines,
    as they are)."""
    if not texts:
        return Stream(texts=[])
    encoded = [t if isinstance(t, bytes) else t.encode("utf-8") for t in texts]
    if not all(encoded) or any(b"\n" in text for text in encoded):
        return Stream(texts=encoded)
    with path.open("wb", buffering=SPOOL_BUFFER) as file:
        file.writelines(chain.from_iterable(zip(encoded, repeat(b"\n"))))
    return Stream(path=str(path))


def _run(
    source: _Source, policy: Policy, allow_pending: bool, pool: FoldPool, started: float
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
    report = _report(source, policy, allow_pending, book, grades, folded)
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


def _report(
    source: _Source,
    policy: Policy,
    allow_pending: bool,
    book: PolicyBook,
    grades: list[GradeApplied],
    folded: list[Folded],
) -> ReplayReport | None:
    """The one-process replay's report from what the workers sent back (None: some text
    said a key or an id the worker did not find)."""
    for part in folded:
        for text in (part.not_utf8, part.decisions.not_utf8, part.responses.not_utf8):
            if text is not None:
                raise UnreadableLog(f"a {text} is not UTF-8")
    special = sorted(index for part in folded for index in part.special)
    if special != [index for index, _ in source.scan.special] or any(
        part.misplaced or part.decisions.misfiled or part.responses.misfiled for part in folded
    ):
        return None
    decisions = _recorded([part.decisions for part in folded], source.decision_texts, Decision)
    responses = _recorded([part.responses for part in folded], source.response_texts, Response)
    if decisions is None or responses is None:
        return None
    progress: dict[int, int] = {}
    for part in folded:
        for origin in part.progress.items():
            advance(progress, origin)
    ranked = [
        (rank, pending(m, progress)) for rank, m in [*decisions.mismatches, *responses.mismatches]
    ]
    ranked.sort(
        key=lambda item: (
            item[1].record,
            KIND_ORDER[item[1].kind],
            item[1].origin or (-1, -1),
            item[0],
        )
    )
    unreadable = {
        "routing": source.scan.unreadable + sum(part.unreadable for part in folded),
        "decisions": decisions.unreadable,
        "outcomes": source.unreadable_outcomes,
        "responses": responses.unreadable,
        "feedback": sum(1 for entry in source.feedback if entry.event is None),
    }
    stored = sorted(
        (part.stored_at[key], key, state) for part in folded for key, state in part.states.items()
    )
    states: dict[str, KeyState] = {key: state for _, key, state in stored}
    errors = sorted(error for part in folded for error in part.errors)
    return ReplayReport(
        source=source.source,
        replay_config_hash=policy.config_hash,
        recorded_config_hashes=decisions.hash_counts(),
        recorded=decisions.recorded,
        rederived=decisions.made,
        reproduced=decisions.reproduced,
        responses_recorded=responses.recorded,
        responses_rederived=responses.made,
        responses_reproduced=responses.reproduced,
        mismatches=[m for _, m in ranked],
        events=sum(part.events for part in folded),
        applied=sum(part.applied for part in folded),
        skipped=sum(part.skipped for part in folded),
        fold_errors=[message for _, message in errors],
        unreadable={name: unreadable[name] for name in STREAMS if unreadable[name]},
        truncated_partitions={p: o for p, o in source.routing_start.items() if o > 0},
        allow_pending=allow_pending,
        grades=_grades(grades, folded, source.feedback),
        states=states,
        policy_versions=versions_of(book),
    )


def _grades(
    grades: list[GradeApplied], folded: list[Folded], feedback: list[Entry[Any]]
) -> GradeCheck:
    if not grades:
        return GradeCheck()
    first: dict[str, tuple[int, str, str, str | None]] = {}
    for part in folded:
        for request_id, answer in part.answers.items():
            known = first.get(request_id)
            if known is None or answer[0] < known[0]:
                first[request_id] = answer
    answers = {request_id: answer[1:] for request_id, answer in first.items()}
    return check_grade_events(
        grades, answers, (entry.event for entry in feedback if entry.event is not None)
    )


def _recorded(
    parts: list[Compared], texts: Callable[[], Sequence[bytes]], model: type[R]
) -> Tally | None:
    """The workers' comparisons of one stream, and the records none of them took (None:
    an id re-derived by two workers)."""
    stream = Tally()
    unrecorded: set[str] = set()
    taken = 0
    for part in parts:
        stream.add(part)
        if unrecorded.intersection(part.unrecorded):
            return None
        unrecorded.update(part.unrecorded)
        took = int.from_bytes(part.taken, "big")  # a byte per position: 1 taken, else 0
        if taken & took:
            return None
        taken |= took
    size = len(parts[0].taken) if parts else 0
    none = set(parts[0].empty) if parts else set()
    found = taken.to_bytes(size, "big")
    orphans = []
    at = found.find(0)
    while at >= 0:
        if at not in none:
            orphans.append(at)
        at = found.find(0, at + 1)
    if orphans and not _orphans(stream, orphans, texts(), model):
        return None
    return stream


def _orphans(stream: Tally, positions: list[int], texts: Sequence[bytes], model: type[R]) -> bool:
    """Records no worker took: parsed here (recorded, never re-derived). False: one of
    them is not the record its text's start says."""
    by_id: dict[str, list[tuple[int, R]]] = {}
    for position in positions:
        text = texts[position]
        try:
            text.decode("utf-8")
        except UnicodeDecodeError as exc:
            name = model.__name__.lower()
            raise UnreadableLog(f"a recorded {name} is not UTF-8: {exc}") from None
        try:
            event = model.model_validate_json(text)
        except ValidationError:
            stream.unreadable += 1
            continue
        prefix = text_id(text)
        if prefix is not None and prefix != event.id.encode("utf-8"):
            return False
        copies = by_id.setdefault(event.id, [])
        if event not in [copy for _, copy in copies]:
            copies.append((position, event))
    for copies in by_id.values():
        first = copies[0][0]
        stream.recorded += len(copies)
        for n, (_, event) in enumerate(copies):
            stream.mismatches.append(((0, first, n), mismatch("not_rederived", event)))
            if isinstance(event, Decision):
                stream.count_hash(event.config_hash, (first, n))
    return True
