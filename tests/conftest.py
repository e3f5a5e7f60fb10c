"""Shared fixtures. The embedded broker is started once per test session."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture
async def stack(broker: EmbeddedBroker) -> AsyncIterator[EmbeddedStack]:
    """A worker with simulated providers (time compressed), on its own topics."""
    namespace = f"t{uuid.uuid4().hex[:8]}"
    running = EmbeddedStack(broker=broker, namespace=namespace, time_scale=0.05, seed=1)
    await running.start(workers=1)
    try:
        yield running
    finally:
        await running.stop()
