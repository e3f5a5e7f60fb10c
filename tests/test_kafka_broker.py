"""The real Apache Kafka launcher: it serves, it stops, and its JVM never outlives its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from up_helpers import ROOT, alive

from app.compat.detect import broker_holds_fetches
from app.embedded.kafka import KafkaBroker

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]


def _gone(pid: int, within_s: float = 20.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def kafka() -> KafkaBroker:
    with KafkaBroker() as broker:
        yield broker  # type: ignore[misc]


async def test_produces_and_consumes(kafka: KafkaBroker) -> None:
    topic = f"k-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka.bootstrap, acks="all", enable_idempotence=True
    )
    await producer.start()
    try:
        for i in range(5):
            await producer.send_and_wait(topic, f"v{i}".encode(), key=b"k")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=kafka.bootstrap,
        auto_offset_reset="earliest",
        group_id=f"g-{uuid.uuid4().hex[:6]}",
    )
    await consumer.start()
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000)
            got += [m.value for records in batch.values() for m in records if m.value is not None]
    finally:
        await consumer.stop()
    assert got == [f"v{i}".encode() for i in range(5)]


async def test_is_not_taken_for_tansu(kafka: KafkaBroker) -> None:
    assert not await broker_holds_fetches(kafka.bootstrap, f"probe-{uuid.uuid4().hex[:8]}")


def test_stop_leaves_no_jvm() -> None:
    broker = KafkaBroker().start()
    pid = broker.pid
    assert pid is not None and alive(pid)
    broker.stop()
    assert _gone(pid)


def test_sigkill_of_the_parent_leaves_no_jvm(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = (
        "import sys, time\n"
        "from app.embedded.kafka import KafkaBroker\n"
        "b = KafkaBroker().start()\n"
        f"open({str(pid_file)!r}, 'w').write(str(b.pid))\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            assert parent.poll() is None
            time.sleep(0.2)
        jvm = int(pid_file.read_text())
        assert alive(jvm)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _gone(jvm)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
