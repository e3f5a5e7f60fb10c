"""Shared fixtures. The embedded brokers are started once per test session.

The broker-bound tests run on Apache Kafka (app/embedded/kafka.py) wherever a JDK and
Maven (or Kafka's cached jars) are present, as on every development and CI machine, and
on Tansu elsewhere; ``SWITCHYARD_TEST_BROKER=tansu|kafka`` chooses. The tests of Tansu's
workarounds (app/compat/) ask for ``tansu``, which is Tansu whatever the session broker.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from app.embedded import kafka
from app.embedded.broker import EmbeddedBroker
from app.embedded.kafka import KafkaBroker
from app.embedded.stack import EmbeddedStack


def session_broker_kind() -> str:
    """``kafka`` or ``tansu``: the broker the broker-bound tests run on."""
    chosen = os.environ.get("SWITCHYARD_TEST_BROKER")
    if chosen is None:
        return "kafka" if kafka.available() else "tansu"
    if chosen not in ("tansu", "kafka"):
        raise pytest.UsageError(f"SWITCHYARD_TEST_BROKER={chosen!r}: tansu or kafka")
    return chosen


def pytest_report_header(config: pytest.Config) -> str:
    return f"broker-bound tests on: {session_broker_kind()}"


@pytest.fixture(scope="session")
def tansu() -> Iterator[EmbeddedBroker]:
    """Tansu, for the tests of its workarounds (the session broker when it is Tansu)."""
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest) -> Iterator[EmbeddedBroker | KafkaBroker]:
    """The session broker: Apache Kafka where it can run, else Tansu (see the module)."""
    if session_broker_kind() == "tansu":
        yield request.getfixturevalue("tansu")
        return
    with KafkaBroker() as running:
        yield running


@pytest.fixture(scope="session")
def kafka_broker(request: pytest.FixtureRequest) -> Iterator[KafkaBroker]:
    """Apache Kafka (the session broker when it is Kafka); skipped where it cannot run."""
    if session_broker_kind() == "kafka":
        yield request.getfixturevalue("broker")
        return
    if not kafka.available():
        pytest.skip("Apache Kafka needs a JDK and Maven (or its cached jars)")
    with KafkaBroker() as running:
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
