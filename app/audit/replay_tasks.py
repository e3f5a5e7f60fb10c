"""What a parallel replay's parent and its workers send each other.

The parent (:mod:`app.audit.replay_parallel`) sends each worker a :class:`FoldTask`:
some routing-log keys' records (a :class:`Chunk`, each record's text or its place in a
file), the replay policy and every policy version, and where to read the recorded
decisions and responses (:class:`Stream`). The worker (:mod:`app.audit.replay_worker`)
sends back a :class:`Folded`: counts, the mismatches, the final states, never a record.
Each recorded stream's figures are a :class:`Tally`, the shape the parent sums them in
(:mod:`app.audit.replay_merge`).

This module imports the fold and the event contract only: the workers import it.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from pathlib import Path

from app.audit.mismatch import Mismatch
from app.audit.replay_fold import FoldCounts, States
from app.contract import GradeApplied, PolicyChanged
from app.routing.book import PolicyBook
from app.routing.policy import Policy

#: Events the parent parses itself (the policy book, the grades' check).
SPECIAL = (PolicyChanged, GradeApplied)
#: Where a mismatch goes among those of its kind and origin, as the one-process replay
#: lists them: (0, position of the id's first recorded copy, n) for a recorded id,
#: (1, index, ordinal of its first re-derived copy, n) for one that is not.
Rank = tuple[int, ...]
#: (index of the first event, route, deployment, context) of a request's final success.
Answer = tuple[int, str, str, str | None]
#: Where a decision's config hash is first counted, as the one-process replay counts
#: (its id's first recorded copy, then the copy's place among the id's).
HashRank = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Records:
    """Records' texts: in memory, or the byte ranges ``starts[i]:ends[i]`` of a file."""

    texts: list[bytes] | None = None
    path: str | None = None
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)

    def load(self) -> list[bytes]:
        if self.texts is not None:
            return self.texts
        if self.path is None or not self.starts:
            return []
        with (
            open(self.path, "rb") as file,
            mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            return [data[start:end] for start, end in zip(self.starts, self.ends, strict=True)]


@dataclass(frozen=True, slots=True)
class Stream:
    """A recorded stream (decisions or responses): its texts in log order, in memory (a
    record's position is its index), or an export file's lines (its line number; an
    empty line holds none). None of either: no record."""

    texts: list[bytes] | None = None
    path: str | None = None

    def positions(self) -> tuple[list[bytes], list[int]]:
        """The text at each position, and the positions that hold no record."""
        if self.texts is not None:
            return self.texts, []
        if self.path is None:
            return [], []
        lines = Path(self.path).read_bytes().split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        return lines, [n for n, line in enumerate(lines) if not line]


@dataclass(frozen=True, slots=True)
class Chunk:
    """Some keys' routing-log records, in log order: four columns of one length."""

    #: The keys the parent put here: every record must be one of theirs.
    keys: frozenset[str]
    #: Each record's index in the whole routing log (its place in the fold's order).
    indices: list[int]
    partitions: list[int]
    offsets: list[int]
    records: Records


@dataclass(frozen=True, slots=True)
class FoldTask:
    """A chunk, what folding it needs (the replay policy and every policy version) and
    the recorded streams to compare with."""

    policy: Policy
    book: PolicyBook
    chunk: Chunk
    decisions: Stream = Stream()
    responses: Stream = Stream()
    #: Send back each request's answer (the log has grades, whose check needs them).
    answers: bool = False


@dataclass(slots=True)
class Tally:
    """One recorded stream's figures: a worker's, for the ids it re-derived, or the
    sum of every worker's and the parent's."""

    #: Re-derived records, each copy counted.
    made: int = 0
    #: Distinct recorded copies, and those reproduced.
    recorded: int = 0
    reproduced: int = 0
    #: Recorded texts that do not parse.
    unreadable: int = 0
    mismatches: list[tuple[Rank, Mismatch]] = field(default_factory=list)
    #: Decisions: config hash -> (rank of its first copy, distinct copies).
    config_hashes: dict[str, tuple[HashRank, int]] = field(default_factory=dict)

    def count_hash(self, config_hash: str, rank: HashRank, copies: int = 1) -> None:
        """``copies`` more distinct decisions with ``config_hash``, the first at ``rank``."""
        seen = self.config_hashes.get(config_hash)
        self.config_hashes[config_hash] = (
            (rank, copies) if seen is None else (min(seen[0], rank), seen[1] + copies)
        )

    def add(self, other: Tally) -> None:
        self.made += other.made
        self.recorded += other.recorded
        self.reproduced += other.reproduced
        self.unreadable += other.unreadable
        self.mismatches.extend(other.mismatches)
        for config_hash, (rank, copies) in other.config_hashes.items():
            self.count_hash(config_hash, rank, copies)

    def hash_counts(self) -> dict[str, int]:
        """Each config hash's distinct decisions, in the order the serial replay counts."""
        ordered = sorted(self.config_hashes.items(), key=lambda item: item[1][0])
        return {config_hash: count for config_hash, (_, count) in ordered}


@dataclass(slots=True)
class Compared(Tally):
    """One recorded stream against what a worker re-derived: its :class:`Tally` (the
    recorded copies are those of the ids re-derived here), and what the parent checks
    and completes it with."""

    #: A byte per position: 1 where a record was taken here, else 0.
    taken: bytes = b""
    #: Positions that hold no record (an export's empty lines).
    empty: list[int] = field(default_factory=list)
    #: Ids re-derived here that no readable recorded copy has.
    unrecorded: list[str] = field(default_factory=list)
    #: Texts taken for an id that parse to another id (read as another layout).
    misfiled: int = 0
    #: A taken text that is not UTF-8: its stream and position.
    not_utf8: str | None = None


@dataclass(slots=True)
class Folded(FoldCounts):
    """What a worker re-derived from its chunk and found comparing it with the record."""

    decisions: Compared = field(default_factory=Compared)
    responses: Compared = field(default_factory=Compared)
    states: States = field(default_factory=dict)
    #: Route -> index of the event whose fold first stored its state (the serial
    #: replay's ``states`` are in that order).
    stored_at: dict[str, int] = field(default_factory=dict)
    #: (index, message) of each record whose fold raised.
    errors: list[tuple[int, str]] = field(default_factory=list)
    #: Routing partition -> offset of the last event whose output is in the record.
    progress: dict[int, int] = field(default_factory=dict)
    #: Indices of the policy changes and grades folded here.
    special: list[int] = field(default_factory=list)
    #: Records whose key is not one of the chunk's.
    misplaced: int = 0
    #: Request id -> its answer (when the task asks).
    answers: dict[str, Answer] = field(default_factory=dict)
    #: A routing record whose text is not UTF-8.
    not_utf8: str | None = None
    #: CPU seconds: all of the chunk, and the fold alone (reading and parsing included).
    cpu_s: float = 0.0
    fold_s: float = 0.0
    #: When the worker began the chunk (epoch seconds).
    received_at: float = 0.0
