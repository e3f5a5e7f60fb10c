"""Pruning the answers table (tables/answers.py): an answered row past its window goes
from the local store without a changelog record; a row still waiting for its answer
goes with a tombstone. Both are gone for the matcher. The expiry index writes no
changelog record, and a worker that restores the rows from the changelog indexes
them, so it prunes them too."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from stack_helpers import chat, collect, send, watch

from app.client import read_raw
from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker
WINDOW_S = 2.0
#: Short windows and sweeps every second (the stack's time runs 20x faster).
ENV = {
    "SWITCHYARD_FEEDBACK_WINDOW_S": str(WINDOW_S),
    "SWITCHYARD_FEEDBACK_MATCH_GRACE_S": "2",
    "SWITCHYARD_TICK_INTERVAL_S": "1",
}


async def _started(broker: EmbeddedBroker, prefix: str) -> EmbeddedStack:
    namespace = f"{prefix}{uuid.uuid4().hex[:8]}"
    stack = EmbeddedStack(broker=broker, namespace=namespace, time_scale=0.05, env=ENV)
    return await stack.start(workers=1)


async def test_answered_rows_are_pruned_without_tombstones_waiting_ones_with(
    broker: EmbeddedBroker,
) -> None:
    stack = await _started(broker, "p")
    namespace = stack.namespace
    try:
        topics = stack.topics
        ids = [f"prune-{i}" for i in range(4)]
        await send(stack, topics.requests, [(None, chat(i)) for i in ids])
        await collect(stack, {topics.responses: len(ids)})
        await send(
            stack, topics.feedback, [(None, {"request_id": "nobody", "score": 1, "source": "user"})]
        )
        await watch(stack, grades=0, letters=1)  # swept after the grace: unmatched
        await asyncio.sleep(WINDOW_S + 3)  # the answered rows' windows end, sweeps run
        late = [(None, {"request_id": ids[0], "score": 1, "source": "task"})]
        await send(stack, topics.feedback, late)
        _, letters, _ = await watch(stack, grades=0, letters=2)

        changelog = f"switchyard-{namespace}-feedback-answers-changelog"
        records = await read_raw(stack.broker.bootstrap, [changelog], idle_s=1.5)
        tombstones = sorted(json.loads(r.key or b"null") for r in records if r.value is None)
        written = {json.loads(r.key or b"null") for r in records if r.value is not None}
        assert set(ids) | {"nobody"} <= written
        # Rows waiting for an answer: "nobody", and the late grade's (the answered row of
        # ids[0] was pruned, so the late grade waited, then went unmatched). The answered
        # rows went without a record.
        assert tombstones == sorted(["nobody", ids[0]])
        assert [(d["reason"], d["detail"]) for d in letters] == [
            ("unmatched_feedback", "unknown_request")
        ] * 2
        index = f"switchyard-{namespace}-feedback-expiry-changelog"
        assert await read_raw(stack.broker.bootstrap, [index], idle_s=1.0) == []
    finally:
        await stack.stop()


async def test_rows_restored_on_a_new_host_are_indexed_and_pruned(
    broker: EmbeddedBroker,
) -> None:
    """A worker with an empty data directory restores the rows from the changelog;
    without their index it would keep them, and a late grade would be ``expired``."""
    stack = await _started(broker, "r")
    try:
        topics = stack.topics
        ids = [f"restore-{i}" for i in range(2)]
        await send(stack, topics.requests, [(None, chat(i)) for i in ids])
        await collect(stack, {topics.responses: len(ids)})
        await asyncio.to_thread(stack.workers[0].stop)
        stack.add_worker()  # a data directory of its own: every row comes from the changelog
        # It answers once it has restored and taken the partitions.
        await send(stack, topics.requests, [(None, chat("restore-probe"))])
        await collect(stack, {topics.responses: len(ids) + 1})
        await asyncio.sleep(WINDOW_S + 3)  # the restored rows' windows end, sweeps run
        late = [(None, {"request_id": ids[0], "score": 1, "source": "user"})]
        await send(stack, topics.feedback, late)
        _, letters, _ = await watch(stack, grades=0, letters=1)
        assert [(d["reason"], d["detail"]) for d in letters] == [
            ("unmatched_feedback", "unknown_request")
        ]
    finally:
        await stack.stop()


def test_the_changelogs_keep_a_row_as_long_as_it_can_live() -> None:
    from tables.answers import changelog_configs

    configs = changelog_configs(window_s=86_400.0, grace_s=60.0)
    assert configs["cleanup.policy"] == "compact,delete"
    assert int(configs["retention.ms"]) >= (86_400 + 60) * 1000
