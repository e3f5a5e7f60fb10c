"""A parallel replay's report, put together from what its workers sent back.

Each worker (:mod:`app.audit.replay_worker`) sends back counts, its mismatches, its
routes' final states and which recorded records it took; never a record. What no
worker took (recorded but re-derived nowhere, or unreadable) the parent parses here:
the recorded-but-not-re-derived mismatches. Each mismatch comes with its rank among
those of its kind and origin in the one-process replay's order (its id's first
recorded copy, or the event that first re-derived it), so sorting them all gives that
order; states go in the order the serial fold first stored them, fold errors and
grades in log order.

What the workers found is checked here too: a policy change or a grade folded where
the parent did not read one, a record not where its text's key said, a recorded text
whose start names another id, or one id re-derived by two workers. Any of these and
:func:`merge` returns None: the parent replays in one process instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from app.audit.grades import GradeCheck, check_grade_events
from app.audit.log import STREAMS, Entry
from app.audit.log_texts import UnreadableLog
from app.audit.mismatch import KIND_ORDER, advance, mismatch, pending
from app.audit.record_keys import text_id
from app.audit.replay_fold import States, versions_of
from app.audit.replay_report import ReplayReport
from app.audit.replay_source import Source
from app.audit.replay_tasks import Compared, Folded, Tally
from app.contract import Decision, GradeApplied, Response
from app.routing.book import PolicyBook
from app.routing.policy import Policy

R = TypeVar("R", Decision, Response)


def merge(
    source: Source,
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
    states: States = {key: state for _, key, state in stored}
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
    tally = Tally()
    unrecorded: set[str] = set()
    taken = 0
    for part in parts:
        tally.add(part)
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
    if orphans and not _orphans(tally, orphans, texts(), model):
        return None
    return tally


def _orphans(tally: Tally, positions: list[int], texts: Sequence[bytes], model: type[R]) -> bool:
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
            tally.unreadable += 1
            continue
        prefix = text_id(text)
        if prefix is not None and prefix != event.id.encode("utf-8"):
            return False
        copies = by_id.setdefault(event.id, [])
        if event not in [copy for _, copy in copies]:
            copies.append((position, event))
    for copies in by_id.values():
        first = copies[0][0]
        tally.recorded += len(copies)
        for n, (_, event) in enumerate(copies):
            tally.mismatches.append(((0, first, n), mismatch("not_rederived", event)))
            if isinstance(event, Decision):
                tally.count_hash(event.config_hash, (first, n))
    return True
