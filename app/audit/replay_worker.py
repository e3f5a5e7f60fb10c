"""What a worker process of a parallel replay does (:mod:`app.audit.replay_parallel`).

A worker gets some routing-log keys' records (a :class:`~app.audit.replay_tasks.Chunk`:
each record's text in memory, or where it is in an export's ``routing.jsonl``, with its
index in the whole log, partition and offset). It parses them and folds them exactly as
:func:`app.audit.replay.rederive` folds the whole log (the same loop,
:class:`~app.audit.replay_fold.Refold`, and the same policy book), and checks that
every record is one of its keys' (the parent read the keys from the texts without
parsing them: a record that is not where its key says is reported, and the parent
replays in one process instead).

Then it compares what it re-derived with the recorded decisions and responses
(:mod:`app.audit.replay_compare`) and sends back counts, the mismatches (each with its
rank: where the one-process replay lists it among those of its kind and origin), the
final states, the routing partitions' progress and a byte per recorded position saying
which records it took: never the records themselves. Records no worker took (recorded,
never re-derived) are the parent's.

This module imports the fold and the event contract only: a worker starts in a fresh
interpreter and imports no broker client, log reader or CLI
(``tests/test_replay_parallel.py``).
"""

from __future__ import annotations

import os
import time

from pydantic import ValidationError

from app.audit.gc_pause import no_cycle_collection
from app.audit.record_keys import ROUTING_RECORD, is_utf8, key_of
from app.audit.replay_compare import compare
from app.audit.replay_fold import Refold
from app.audit.replay_tasks import SPECIAL, Answer, Folded, FoldTask
from app.contract import AttemptFinished, Decision, Response, StatusClass
from app.routing.driver import Driver
from app.routing.propensity import forget_propensities


def ready() -> int:
    """A worker's first call (the pool's initializer warms it): its process id."""
    return os.getpid()


def fold_chunk(task: FoldTask) -> Folded:
    """Parse and fold a chunk as :func:`app.audit.replay.rederive` folds a whole log, then
    compare what it made with the recorded decisions and responses.

    Each chunk starts with Thompson's propensity cache empty, as a fresh worker does
    (a pure cache: the same numbers either way, but a pool that folds again is timed
    as the first time)."""
    received = time.time()
    forget_propensities()
    started = time.process_time()
    with no_cycle_collection():
        folded, refold = _fold(task)
        folded.fold_s = time.process_time() - started
        folded.decisions = compare(refold.decisions, task.decisions, Decision, folded.progress)
        folded.responses = compare(refold.responses, task.responses, Response, folded.progress)
    folded.cpu_s = time.process_time() - started
    folded.received_at = received
    return folded


def _fold(task: FoldTask) -> tuple[Folded, Refold]:
    policy = task.policy
    out = Folded()
    states = out.states
    refold = Refold(Driver(lambda: policy, states=states, book=task.book), out, errors=out.errors)
    chunk = task.chunk
    keys = chunk.keys
    parse = ROUTING_RECORD.validate_json
    for index, partition, offset, text in zip(
        chunk.indices, chunk.partitions, chunk.offsets, chunk.records.load(), strict=True
    ):
        if not text.isascii() and not is_utf8(text):
            out.not_utf8 = f"routing record at partition {partition} offset {offset}"
            continue
        try:
            event = parse(text)
        except ValidationError:  # unreadable: the router dead-letters it
            out.unreadable += 1
            continue
        if key_of(event) not in keys:
            out.misplaced += 1
        if isinstance(event, SPECIAL):
            out.special.append(index)
        elif task.answers and isinstance(event, AttemptFinished):
            _answer(out.answers, event, index)
        known = len(states)
        refold.fold(event, index, partition, offset)
        if len(states) != known:
            out.stored_at[next(reversed(states))] = index
    return out, refold


def _answer(found: dict[str, Answer], event: AttemptFinished, index: int) -> None:
    """As :func:`app.audit.grades.answer_of`: a final success answers its request."""
    outcome = event.outcome
    if outcome.final and outcome.status_class is StatusClass.SUCCESS:
        context = getattr(outcome, "context", None)
        found.setdefault(outcome.request_id, (index, outcome.route, outcome.deployment, context))
