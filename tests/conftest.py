"""Shared fixtures. The embedded broker is started once per test session."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from app.embedded.broker import EmbeddedBroker
from app.embedded.kafka import KafkaBroker
from app.embedded.stack import EmbeddedStack


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker | KafkaBroker]:
    """Tansu, or Apache Kafka (app/embedded/kafka.py) when ``SWITCHYARD_TEST_BROKER=kafka``."""
    chosen = os.environ.get("SWITCHYARD_TEST_BROKER", "tansu")
    if chosen not in ("tansu", "kafka"):
        raise pytest.UsageError(f"SWITCHYARD_TEST_BROKER={chosen!r}: tansu or kafka")
    with KafkaBroker() if chosen == "kafka" else EmbeddedBroker() as running:
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
