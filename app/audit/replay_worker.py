"""What a worker process of a parallel replay does (:mod:`app.audit.replay_parallel`).

A worker gets some routes' routing-log records as their text, with each record's
index in the whole log and its partition and offset; it parses them and folds them
exactly as :func:`app.audit.replay.rederive` folds the whole log (the same
:class:`~app.routing.driver.Driver`, the same policy book), and sends back what it
re-derived as the JSON the router publishes (``model_dump_json``), each record with
its id and the index of the event that made it, so the parent can put everything
back in log order and compare it with the recorded text.

This module imports the fold and the event contract only: a worker starts in a fresh
interpreter and imports no broker client, log reader or CLI
(``tests/test_replay_parallel.py``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from pydantic import TypeAdapter

from app.audit.gc_pause import no_cycle_collection
from app.contract import AttemptFinished, RoutingEvent, RoutingLogEvent
from app.routing.answers import answers, success_response
from app.routing.book import PolicyBook
from app.routing.driver import Driver
from app.routing.policy import Policy
from app.routing.propensity import forget_propensities
from app.routing.state import RouteState

#: A routing-log record's text to its event, as app.audit.log parses it.
ROUTING_RECORD: TypeAdapter[RoutingEvent] = TypeAdapter(RoutingLogEvent)

#: A re-derived record: the index of the routing-log entry that made it, the record's id,
#: its JSON, and the entry's (partition, offset).
Made = tuple[int, str, str, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Chunk:
    """Some routes' routing-log records, in log order: four columns of one length."""

    #: Each record's index in the whole routing log (the parent's ``log.routing``).
    indices: list[int]
    partitions: list[int]
    offsets: list[int]
    #: The record's exact text (``Entry.raw``), parsed here.
    raws: list[str]


@dataclass(frozen=True, slots=True)
class FoldTask:
    """A chunk and what folding it needs: the replay policy and every policy version."""

    policy: Policy
    book: PolicyBook
    chunk: Chunk


@dataclass(slots=True)
class Folded:
    """What a worker re-derived from its chunk; indices are the chunk's own."""

    decisions: list[Made] = field(default_factory=list)
    responses: list[Made] = field(default_factory=list)
    states: dict[str, RouteState] = field(default_factory=dict)
    #: Route -> index of the event whose fold first stored its state (the serial
    #: replay's ``states`` are in that order).
    stored_at: dict[str, int] = field(default_factory=dict)
    events: int = 0
    applied: int = 0
    skipped: int = 0
    #: (index, message) of each record whose fold raised.
    errors: list[tuple[int, str]] = field(default_factory=list)
    #: CPU seconds the worker spent on the chunk (parsing, folding, serialising).
    cpu_s: float = 0.0
    #: When the worker began the chunk (epoch seconds).
    received_at: float = 0.0


def ready() -> int:
    """A worker's first call (the pool's initializer warms it): its process id."""
    return os.getpid()


def fold_chunk(task: FoldTask) -> Folded:
    """Parse and fold a chunk as :func:`app.audit.replay.rederive` folds a whole log.

    Each chunk starts with Thompson's propensity cache empty, as a fresh worker does
    (a pure cache: the same numbers either way, but a pool that folds again is timed
    as the first time)."""
    received = time.time()
    forget_propensities()
    started = time.process_time()
    with no_cycle_collection():
        folded = _fold(task)
    folded.cpu_s = time.process_time() - started
    folded.received_at = received
    return folded


def _fold(task: FoldTask) -> Folded:
    policy = task.policy
    out = Folded()
    states = out.states
    driver = Driver(lambda: policy, states=states, book=task.book)
    chunk = task.chunk
    parse = ROUTING_RECORD.validate_json
    for index, partition, offset, raw in zip(
        chunk.indices, chunk.partitions, chunk.offsets, chunk.raws, strict=True
    ):
        event = parse(raw)
        where = (partition, offset)
        out.events += 1
        known = len(states)
        try:
            step = driver.fold(event, offset)
        except Exception as exc:  # the router dead-letters these and keeps the row
            out.errors.append((index, f"partition {partition} offset {offset}: {exc!r}"))
            continue
        finally:
            if len(states) != known:
                out.stored_at[next(reversed(states))] = index
        if not step.applied:
            out.skipped += 1
            if isinstance(event, AttemptFinished) and event.answered and answers(event):
                copy = success_response(event)  # as app.audit.replay._executor_copy
                out.responses.append((index, copy.id, copy.model_dump_json(), where))
            continue
        out.applied += 1
        for dispatch in step.dispatches:
            decision = dispatch.decision
            out.decisions.append((index, decision.id, decision.model_dump_json(), where))
        for response in step.responses:
            out.responses.append((index, response.id, response.model_dump_json(), where))
    return out
