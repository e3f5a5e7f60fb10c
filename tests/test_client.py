"""app/client.py against the embedded broker."""

from __future__ import annotations

import uuid

import pytest

from app.client import TopicFollower
from app.embedded.broker import EmbeddedBroker

pytestmark = pytest.mark.broker


async def test_following_a_topic_that_does_not_exist_fails_and_leaves_nothing_open(
    broker: EmbeddedBroker,
) -> None:
    follower = TopicFollower(broker.bootstrap, [f"missing-{uuid.uuid4().hex[:6]}"])
    with pytest.raises(LookupError):
        await follower.start()
    assert follower._consumer._closed is True
