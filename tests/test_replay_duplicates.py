"""Replay of answers published twice: an attempt executed on two workers."""

from __future__ import annotations

from factories import T0, accepted, dep, finish, fold
from test_replay import three

from app.audit.log import RecordedLog, parse
from app.audit.replay import replay
from app.contract import AttemptFinished
from app.routing.answers import success_response

CHEAP = dep("cerebras-x")


def test_an_attempt_executed_twice_answers_twice_and_replays_exactly() -> None:
    """A rebalance handed a dispatch over while its first call was done: two reports, two
    answers published by the executors (same response id); the fold applies the first
    report, and replay derives both copies from the log, so a forged copy is still caught."""
    pol = three()
    completion = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}

    def answered(t: float) -> AttemptFinished:
        done = finish("r1", CHEAP, t).model_copy(update={"completion": completion})
        return done.model_copy(update={"answered": True})

    events = [accepted("r1", T0), answered(T0 + 1), answered(T0 + 4)]
    routing = [parse("routing", 0, i, e.model_dump_json()) for i, e in enumerate(events)]
    decisions = [parse("decisions", 0, 0, fold(events, pol).decisions[0].model_dump_json())]
    copies = [success_response(e) for e in events[1:]]
    assert copies[0].id == copies[1].id and copies[0] != copies[1]
    responses = [parse("responses", 0, i, r.model_dump_json()) for i, r in enumerate(copies)]
    report = replay(RecordedLog("test", routing, decisions, [], responses), pol)
    assert report.ok and report.responses_reproduced == 2
    forged = copies[1].model_copy(update={"attempts": 2})
    responses[1] = parse("responses", 0, 1, forged.model_dump_json())
    report = replay(RecordedLog("test", routing, decisions, [], responses), pol)
    assert not report.ok and report.count("differs", "response") == 1
