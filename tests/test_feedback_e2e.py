"""Feedback end to end on the embedded broker: requests answered, feedback
published (keyed any way, some bad, one early, one for no request), grades on the
routing log exactly once per feedback id, the replacement rule, dead letters for the
rest, and a replay of the whole log with 0 mismatches."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from stack_helpers import SECRET_PROMPT, chat, collect, send, switchyard, watch

from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker


@pytest.fixture
async def fast_stack(broker: EmbeddedBroker) -> AsyncIterator[EmbeddedStack]:
    """A worker whose early feedback waits 3 s for its answer, with sweeps every second."""
    env = {"SWITCHYARD_FEEDBACK_MATCH_GRACE_S": "3", "SWITCHYARD_TICK_INTERVAL_S": "1"}
    namespace = f"t{uuid.uuid4().hex[:8]}"
    running = EmbeddedStack(broker=broker, namespace=namespace, time_scale=0.05, seed=1, env=env)
    await running.start(workers=1)
    try:
        yield running
    finally:
        await running.stop()


def fb(request_id: str, **fields: Any) -> dict[str, Any]:
    return {"request_id": request_id, "source": "user", **fields}


async def test_feedback_is_matched_applied_once_and_replayed(fast_stack: EmbeddedStack) -> None:
    stack, topics = fast_stack, fast_stack.topics
    # Feedback for a request not published yet: it waits for the answer.
    await send(stack, topics.feedback, [(None, fb("fb-early", score=0.6, source="task"))])
    ids = [f"fb-{i}" for i in range(6)] + ["fb-early"]
    await send(stack, topics.requests, [(None, chat(i)) for i in ids])
    seen = await collect(stack, {topics.responses: len(ids)})
    answers = {r["request_id"]: r for r in seen[topics.responses]}
    ok = [i for i in ids if answers[i]["status"] == "ok" and i != "fb-early"]
    assert len(ok) >= 3 and answers["fb-early"]["status"] == "ok", answers

    first, second, third = ok[:3]
    await send(
        stack,
        topics.feedback,
        [
            (None, fb(first, label="thumbs_up")),
            (first.encode(), fb(first, label="thumbs_up")),  # a re-send: dropped
            (None, fb(first, score=0.9, source="judge")),  # another source: adds
            (b"wrong-key", fb(second, score=0.5, weight=2)),
            (None, fb(third, score=0.1, comment=SECRET_PROMPT)),
            (None, fb("nobody", score=1)),  # never answered: unmatched
            (None, b"{broken"),
            (None, fb(second, score=1, label="thumbs_up")),  # both: bad_feedback
        ],
    )
    await watch(stack, grades=5, letters=3)
    # Records keyed differently may be read in any order: the replacement comes after.
    await send(stack, topics.feedback, [(b"any-key", fb(first, score=0.2))])
    grades, letters, raw = await watch(stack, grades=6, letters=3)

    assert len({g["id"] for g in grades}) == len(grades) == 6, grades
    by_key = {(g["request_id"], g["source"], g["score"]): g for g in grades}
    assert by_key[(first, "user", 1.0)]["replaces_score"] is None
    assert by_key[(first, "user", 0.2)]["replaces_score"] == 1.0
    assert by_key[(first, "judge", 0.9)]["replaces_score"] is None
    assert by_key[(second, "user", 0.5)]["weight"] == 2.0
    early = by_key[("fb-early", "task", 0.6)]
    assert early["deployment"] == answers["fb-early"]["deployment"]
    assert all(g["deployment"] == answers[g["request_id"]]["deployment"] for g in grades)
    reasons = sorted((d["reason"], d["detail"]) for d in letters)
    assert [r for r, _ in reasons] == ["bad_feedback", "not_json", "unmatched_feedback"]
    assert ("unmatched_feedback", "unknown_request") in reasons
    assert not any(SECRET_PROMPT.encode() in value for value in raw)

    code, out = await switchyard(stack, "replay", "--json", "--allow-pending")
    report = json.loads(out)
    assert code == 0 and report["mismatched"] == 0, report
    assert report["reproduced"] == report["decisions"] >= len(ids)
    assert report["grades"] == {"recorded": 6, "verified": 6, "problems": []}

    code, out = await switchyard(stack, "audit", first, "--json")
    trace = json.loads(out)
    assert code == 0
    applied = [(g["source"], g["score"]) for g in trace["grades"]]
    assert sorted(applied[:2]) == [("judge", 0.9), ("user", 1.0)]
    assert applied[2] == ("user", 0.2) and trace["grades"][2]["replaces_score"] == 1.0
