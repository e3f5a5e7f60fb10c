"""Routing-log events folded again as the live router folded them, and what that made.

One loop for both replays: the one-process replay (:func:`app.audit.replay.rederive`)
folds the whole log with it, a parallel replay's worker (:mod:`app.audit.replay_worker`)
its chunk. Each event goes through the router's own
:class:`~app.routing.driver.Driver` with its offset as ``position``; an event the
router skipped (a duplicate: ``Step.applied`` False) is skipped the same way, and a
record whose fold raises (the router dead-letters it) changes no state. Both read the
log's policy versions before folding (:func:`policy_book`), and report them with their
config hashes (:func:`versions_of`).

This module imports the fold and the event contract only: the workers import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from app.contract import AttemptFinished, Decision, PolicyChanged, Response, RoutingEvent
from app.routing.answers import answers, success_response
from app.routing.book import PolicyBook
from app.routing.driver import Driver
from app.routing.keys import KeyState

R = TypeVar("R", Decision, Response)
#: (partition, offset) of a routing-log event.
Origin = tuple[int, int]
#: The states a fold keeps, by routing-log key (the driver's ``states``).
States = dict[str, KeyState]


def policy_book(events: Iterable[RoutingEvent | None]) -> PolicyBook:
    """Every policy version among the routing log's events (read before folding: a route
    that has folded none yet uses the first)."""
    book = PolicyBook()
    for event in events:
        if isinstance(event, PolicyChanged):
            book.add(event.version, event.document, event.hash)
    return book


def versions_of(book: PolicyBook) -> dict[int, str]:
    """The book's versions with their policies' config hashes, in version order (a
    report's ``policy_versions``)."""
    return {v: p.config_hash for v, p in sorted(book.versions.items())}


@dataclass(slots=True)
class FoldCounts:
    """How a fold went, as the router would count it."""

    #: Events folded (readable ones), applied, and skipped as duplicates.
    events: int = 0
    applied: int = 0
    skipped: int = 0
    #: Records that do not parse (the router dead-letters them; folded by no one).
    unreadable: int = 0


@dataclass(slots=True)
class Made(Generic[R]):
    """A re-derived record: where it was made (the event's place and its index in the
    fold's order), its ordinal among all the fold made, and its JSON once asked for."""

    record: R
    origin: Origin
    index: int
    ordinal: int
    json: bytes | None = None

    def text(self) -> bytes:
        """The record's JSON as the router publishes it (``model_dump_json``)."""
        if self.json is None:
            self.json = self.record.__pydantic_serializer__.to_json(self.record)
        return self.json


@dataclass(slots=True)
class Refold:
    """A driver's fold of routing-log events, one :meth:`fold` call an event in log order,
    counted in ``counts``."""

    driver: Driver
    counts: FoldCounts = field(default_factory=FoldCounts)
    #: What the fold made, in the order it made them.
    decisions: list[Made[Decision]] = field(default_factory=list)
    responses: list[Made[Response]] = field(default_factory=list)
    #: (index, message) of each event whose fold raised.
    errors: list[tuple[int, str]] = field(default_factory=list)

    def fold(self, event: RoutingEvent, index: int, partition: int, offset: int) -> None:
        """Fold one event as the router did: its dispatched decisions, the decisions
        answered from the response cache and its responses are kept (an attempt the
        router skipped as a duplicate keeps its executor's copy of the answer).

        An attempt executed twice (its worker died after the call, or a rebalance handed
        the dispatch over) reports twice; the fold applies the first report only, but
        each executor published its successful answer at once (same response id: a
        duplicate delivery). The log holds both reports, so replay derives both copies."""
        counts = self.counts
        counts.events += 1
        try:
            step = self.driver.fold(event, offset)
        except Exception as exc:  # the router dead-letters these and keeps the row
            self.errors.append((index, f"partition {partition} offset {offset}: {exc!r}"))
            return
        where = (partition, offset)
        decisions, responses = self.decisions, self.responses
        if not step.applied:
            counts.skipped += 1
            if isinstance(event, AttemptFinished) and event.answered and answers(event):
                copy = success_response(event)
                responses.append(Made(copy, where, index, len(decisions) + len(responses)))
            return
        counts.applied += 1
        ordinal = len(decisions) + len(responses)
        for dispatch in step.dispatches:
            decisions.append(Made(dispatch.decision, where, index, ordinal))
            ordinal += 1
        for decision in step.decisions:  # answered from the response cache
            decisions.append(Made(decision, where, index, ordinal))
            ordinal += 1
        for response in step.responses:
            responses.append(Made(response, where, index, ordinal))
            ordinal += 1


def distinct_by_id(made: list[Made[R]]) -> dict[str, list[Made[R]]]:
    """Distinct re-derived copies per id, in log order, each where the first identical
    copy was made. The same id twice with different content is legitimate: a request
    redelivered after its first attempt closed is routed again under the same ids."""
    by_id: dict[str, list[Made[R]]] = {}
    for item in made:
        record_id = item.record.id
        same_id = by_id.get(record_id)
        if same_id is None:
            by_id[record_id] = [item]
        elif item.record not in [copy.record for copy in same_id]:
            same_id.append(item)
    return by_id
