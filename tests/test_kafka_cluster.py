"""Three replicated Apache Kafka nodes: a record acknowledged by ``acks=all`` survives the
SIGKILL of its partition's leader, the node rejoins the ISR when restarted, and no JVM of
the cluster outlives its stop or its parent."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic
from up_helpers import ROOT, alive

from app.embedded import kafka
from app.embedded.kafka_cluster import KafkaCluster
from app.embedded.stack import EmbeddedStack

pytestmark = [
    pytest.mark.broker,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not kafka.available(), reason="Apache Kafka needs a JDK and Maven"),
]


def _gone(pids: set[int], within_s: float = 30.0) -> set[int]:
    """The pids still alive after ``within_s`` (none as soon as all are gone)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return {pid for pid in pids if alive(pid)}


def _java_processes_naming(text: str) -> set[int]:
    """Every live java process whose command line contains ``text`` (a cluster's data dir)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            words = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if words and Path(words[0].decode()).name == "java" and text.encode() in b" ".join(words):
            found.add(int(entry))
    return {pid for pid in found if alive(pid)}


async def _produce(cluster: KafkaCluster, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=cluster.bootstrap, acks="all", request_timeout_ms=60_000
    )
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()


async def _read(
    cluster: KafkaCluster, topic: str, count: int, within_s: float = 60.0
) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False)
    await consumer.start()
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + within_s
        while len(got) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            got += [r.value for rs in batches.values() for r in rs if r.value is not None]
    finally:
        await consumer.stop()
    return got


async def test_a_record_survives_its_leaders_sigkill_and_the_node_rejoins() -> None:
    cluster = KafkaCluster()
    await asyncio.to_thread(cluster.start)
    data_dir = str(cluster.data_dir)
    pids = set(cluster.pids.values())
    try:
        assert len(pids) == 3 and len(cluster.bootstrap.split(",")) == 3
        topic = f"replicated-{uuid.uuid4().hex[:8]}"
        admin = kafka.own_admin_client(cluster.bootstrap)
        await admin.start()
        try:
            configs = {"min.insync.replicas": "2"}
            await admin.create_topics([NewTopic(topic, 1, 3, topic_configs=configs)])
        finally:
            await admin.close()
        await _produce(cluster, topic, [b"before"])
        (state,) = await cluster.partitions([topic])
        assert sorted(state.replicas) == [1, 2, 3] and sorted(state.isr) == [1, 2, 3], state

        leader = state.leader
        cluster.kill(leader)  # the only copy, were the topic not replicated
        assert not cluster.node(leader).running
        await _produce(cluster, topic, [b"after"])  # acks=all: the 2 others, min ISR 2
        assert await _read(cluster, topic, 2) == [b"before", b"after"]
        (moved,) = await cluster.partitions([topic])
        assert moved.leader not in (-1, leader) and leader not in moved.isr, moved

        await asyncio.to_thread(cluster.restart, leader)
        await cluster.wait_in_sync(leader, timeout_s=60)
        (back,) = await cluster.partitions([topic])
        assert leader in back.isr, back
        assert await cluster.out_of_sync(leader) == []  # internal topics too
    finally:
        await asyncio.to_thread(cluster.stop)
    assert _gone(pids | set(cluster.pids.values())) == set()
    assert _java_processes_naming(data_dir) == set()


def test_no_jvm_of_the_cluster_outlives_its_sigkilled_parent(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    script = (
        "import time\n"
        "from app.embedded.kafka_cluster import KafkaCluster\n"
        "c = KafkaCluster().start()\n"
        f"open({str(pid_file)!r}, 'w').write(' '.join(map(str, c.pids.values())) + "
        "' ' + str(c.data_dir))\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    try:
        deadline = time.monotonic() + 150
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            assert parent.poll() is None
            time.sleep(0.2)
        *pids, data_dir = pid_file.read_text().split()
        jvms = {int(pid) for pid in pids}
        assert len(jvms) == 3 and all(alive(pid) for pid in jvms)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _gone(jvms) == set()
        assert _java_processes_naming(data_dir) == set()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if pid_file.exists():  # a SIGKILLed parent could not remove the nodes' data
            shutil.rmtree(pid_file.read_text().split()[-1], ignore_errors=True)


def test_a_stack_on_the_cluster_replicates_its_topics_three_times_two_in_sync() -> None:
    stack = EmbeddedStack(broker=KafkaCluster())
    plain = EmbeddedStack()
    try:
        env = stack.worker_env(0)
        assert env["SWITCHYARD_REPLICATION_FACTOR"] == "3"
        assert env["SWITCHYARD_MIN_INSYNC_REPLICAS"] == "2"
        assert env["SWITCHYARD_BROKER"].count("kafka://") == 3
        settings = stack.settings()
        assert (settings.replication_factor, settings.min_insync_replicas) == (3, 2)
        assert "SWITCHYARD_REPLICATION_FACTOR" not in plain.worker_env(0)  # a single node
    finally:
        shutil.rmtree(stack.workdir, ignore_errors=True)
        shutil.rmtree(plain.workdir, ignore_errors=True)
