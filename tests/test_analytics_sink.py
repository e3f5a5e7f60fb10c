"""The analytics sink on the embedded broker: ~10,000 events with re-sends, the sink
SIGKILLed in the middle and restarted, and every table ends with one row per event."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
import zlib
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from app.analytics.load import log_records
from app.analytics.schema import EVENT_TABLES
from app.analytics.store import SourceRecord, Store
from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import namespaced_topics
from app.kafka import ensure_topics
from app.settings import Settings, Topics
from bench.logs.sample import sample_log

pytestmark = pytest.mark.broker
PARTITIONS = 4


def published(records: list[SourceRecord], topics: Topics) -> list[SourceRecord]:
    """The sample's records as a worker publishes them: public streams spread over the
    partitions by request id, the routing log on the route's partition."""
    names = {"routing": topics.routing, "decisions": topics.decisions,
             "outcomes": topics.outcomes, "responses": topics.responses,
             "feedback": topics.feedback}  # fmt: skip
    spread = []
    for r in records:
        request = json.loads(r.value).get("request_id", "")
        partition = r.partition if r.stream == "routing" else zlib.crc32(request.encode()) % 4
        spread.append(SourceRecord(r.stream, names[r.stream], partition, -1, r.value))
    return spread


async def produce(bootstrap: str, records: list[SourceRecord]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for r in records:
            await producer.send(r.topic, r.value, partition=r.partition)
        await producer.flush()
    finally:
        await producer.stop()


def sink_env(broker: EmbeddedBroker, topics: Topics) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
    env.update(SWITCHYARD_BROKER=broker.url, SWITCHYARD_TANSU_COMPAT="1")
    for name, topic in topics.model_dump().items():
        env[f"SWITCHYARD_TOPIC_{name.upper()}"] = topic
    return env


async def test_a_killed_sink_restarts_and_keeps_one_row_per_event(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topics = namespaced_topics(f"a{uuid.uuid4().hex[:8]}")
    settings = Settings(broker=broker.url, partitions=PARTITIONS, topics=topics)
    await ensure_topics(settings)
    log = sample_log(1800, policy_every=600)
    records = published(list(log_records(log, Topics())), topics)
    resent = records[::12]  # a producer re-sends: same events (same ids), new offsets
    assert len(records) + len(resent) >= 10_000
    half = len(records) // 2
    await produce(broker.bootstrap, records[:half] + resent[: len(resent) // 2])

    db = tmp_path / "analytics.duckdb"
    command = [sys.executable, "-m", "app.cli", "analytics", "--db", str(db)]
    env = sink_env(broker, topics)
    sink = subprocess.Popen(
        [*command, "--progress", "--batch-max", "300"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        folded = await asyncio.wait_for(asyncio.to_thread(_until_folded, sink, 2000), 60)
    finally:
        sink.send_signal(signal.SIGKILL)  # a crash, wherever it is
        sink.wait()
    assert 2000 <= folded < half  # killed in the middle

    await produce(broker.bootstrap, records[half:] + resent[len(resent) // 2 :])
    done = await asyncio.to_thread(
        subprocess.run, [*command, "--once", "--json"], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout.decode().splitlines()[-1])
    assert summary["skipped"] == 0

    reference = Store()  # the same events, each folded once
    reference.apply([SourceRecord(r.stream, r.topic, 0, i, r.value) for i, r in enumerate(records)])
    expected = {t.name: reference.counts()[t.name] for t in EVENT_TABLES}
    assert all(expected.values())
    store = Store(db, read_only=True)
    try:
        assert {t.name: store.counts()[t.name] for t in EVENT_TABLES} == expected
        for table in EVENT_TABLES:
            extra = store.query(f"SELECT count(*) - count(DISTINCT id) FROM {table.name}")[0][0]
            assert extra == 0, table.name
        read = sum(offset for offset in store.offsets().values())
        assert read == len(records) + len(resent)  # every record read, up to the end
    finally:
        store.close()


def _until_folded(process: subprocess.Popen[str], at_least: int) -> int:
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("folded "):
            folded = int(line.split()[1])
            if folded >= at_least:
                return folded
    raise AssertionError(f"the sink exited with {process.wait()} before folding {at_least}")
