"""Three Apache Kafka KRaft nodes on loopback, replicated: a cluster that can lose a broker.

Each node is a broker and a controller (``process.roles=broker,controller``) of one
cluster id, with a static quorum of the three (``controller.quorum.voters``), every
listener on 127.0.0.1, and a small heap. Topics are replicated 3 times and need 2 in-sync
replicas (the cluster's defaults, and its internal topics' settings): with producers'
``acks=all`` one node can die or stall without losing an acknowledged record.

A node can be SIGKILLed and restarted on the same data directory, or SIGSTOPped and
continued; :meth:`KafkaCluster.partitions` says who leads each partition and who is in
its ISR. The jars, JVM options and lifetime are those of :mod:`app.embedded.kafka`: every
JVM dies with the process that started the cluster, even when it is SIGKILLed, and
:meth:`KafkaCluster.stop` (also on a failed start) stops them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.embedded.broker import free_port
from app.embedded.child_env import child_env
from app.embedded.kafka import (
    SMALL_SERVER_SETTINGS,
    format_storage_command,
    kafka_answers,
    kafka_classpath,
    new_cluster_id,
    own_admin_client,
    server_command,
    spawn_jvm,
)
from app.lifetime import Started, die_with_parent, stop_process

if TYPE_CHECKING:
    from aiokafka.admin import AIOKafkaAdminClient

#: Copies of every partition, and how many must have a record before ``acks=all`` is met.
CLUSTER_REPLICATION_FACTOR = 3
CLUSTER_MIN_INSYNC_REPLICAS = 2


@dataclass(frozen=True)
class PartitionState:
    """One partition as the cluster's metadata has it (``leader`` -1: none)."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class KafkaNode:
    """One KRaft node (broker and controller) of a :class:`KafkaCluster`."""

    def __init__(self, node_id: int, host: str, port: int, controller_port: int) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.controller_port = controller_port
        self.data: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def serving(self) -> bool:
        """Running and not stopped by SIGSTOP."""
        return self.running and not self.paused

    @property
    def props(self) -> Path:
        assert self.data is not None, "the node has no data directory before the cluster starts"
        return self.data / "server.properties"

    @property
    def log_path(self) -> Path:
        assert self.data is not None
        return self.data / "kafka.log"

    def config(self, voters: str) -> str:
        assert self.data is not None
        replicas, min_isr = CLUSTER_REPLICATION_FACTOR, CLUSTER_MIN_INSYNC_REPLICAS
        return "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={self.node_id}",
                f"controller.quorum.voters={voters}",
                f"listeners=PLAINTEXT://{self.bootstrap},"
                f"CONTROLLER://{self.host}:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://{self.bootstrap}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={self.data / 'logs'}",
                "num.partitions=1",
                f"default.replication.factor={replicas}",
                f"min.insync.replicas={min_isr}",
                "unclean.leader.election.enable=false",
                f"offsets.topic.replication.factor={replicas}",
                "offsets.topic.num.partitions=4",
                f"transaction.state.log.replication.factor={replicas}",
                f"transaction.state.log.min.isr={min_isr}",
                f"share.coordinator.state.topic.replication.factor={replicas}",
                f"share.coordinator.state.topic.min.isr={min_isr}",
                "num.replica.fetchers=1",
                *SMALL_SERVER_SETTINGS,
                "",
            ]
        )

    def spawn(self, classpath: str, heap: str) -> None:
        self.process = spawn_jvm(server_command(classpath, self.props, heap), self.log_path)
        self.paused = False

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except (OSError, AssertionError):
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _distinct_ports(host: str, count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


class KafkaCluster(Started):
    """``size`` KRaft nodes on ``host``; the broker interface of :class:`EmbeddedStack`
    (``bootstrap``, ``url``, ``start``, ``stop``, ``resume``, ``is_tansu``)."""

    is_tansu = False
    replication_factor = CLUSTER_REPLICATION_FACTOR
    min_insync_replicas = CLUSTER_MIN_INSYNC_REPLICAS

    def __init__(self, size: int = 3, host: str = "127.0.0.1", heap: str = "256m") -> None:
        if size < CLUSTER_REPLICATION_FACTOR:
            raise ValueError(f"a cluster of {size} cannot hold {CLUSTER_REPLICATION_FACTOR} copies")
        self.host = host
        self.heap = heap
        ports = _distinct_ports(host, 2 * size)
        self.nodes = [
            KafkaNode(index + 1, host, ports[2 * index], ports[2 * index + 1])
            for index in range(size)
        ]
        self.cluster_id = new_cluster_id()
        self._classpath = ""
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def bootstrap(self) -> str:
        """Every node, as a client's ``bootstrap_servers``."""
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def url(self) -> str:
        """Every node, as ``SWITCHYARD_BROKER`` (Faust's list of URLs)."""
        return ";".join(f"kafka://{node.bootstrap}" for node in self.nodes)

    @property
    def data_dir(self) -> Path | None:
        """Where the nodes keep their logs and configs (None when not started)."""
        return Path(self._dir.name) if self._dir is not None else None

    @property
    def pids(self) -> dict[int, int]:
        """Node id → JVM pid, of the nodes running."""
        return {n.node_id: n.pid for n in self.nodes if n.running and n.pid is not None}

    def node(self, node_id: int) -> KafkaNode:
        return {n.node_id: n for n in self.nodes}[node_id]  # KeyError: no such node

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float = 180.0) -> KafkaCluster:
        """Format every node's storage, start them, and return once all serve as brokers."""
        try:
            self._classpath = kafka_classpath()
            self._dir = tempfile.TemporaryDirectory(prefix="switchyard-kafka-cluster-")
            voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.nodes)
            for node in self.nodes:
                node.data = Path(self._dir.name) / f"node-{node.node_id}"
                node.data.mkdir()
                node.props.write_text(node.config(voters))
            self._format_all()
            for node in self.nodes:
                node.spawn(self._classpath, self.heap)
            self._wait_serving(self.nodes, time.monotonic() + timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _format_all(self) -> None:
        formats = [
            subprocess.Popen(
                format_storage_command(self._classpath, n.props, self.cluster_id, self.heap),
                env=child_env(None),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
            for n in self.nodes
        ]
        try:
            for node, process in zip(self.nodes, formats, strict=True):
                if process.wait(timeout=180) != 0:
                    raise RuntimeError(f"formatting node {node.node_id} failed")
        finally:
            for process in formats:
                if process.poll() is None:
                    process.kill()
                    process.wait()

    def _wait_serving(self, nodes: Iterable[KafkaNode], deadline: float) -> None:
        """Until each of ``nodes`` answers and the cluster lists it among its live brokers."""
        waiting = list(nodes)
        while True:
            for node in (n for n in waiting if not n.running):
                code = node.process.returncode if node.process is not None else None
                raise RuntimeError(f"Kafka node {node.node_id} exited ({code}):\n{node.log_tail()}")
            if all(kafka_answers(n.host, n.port) for n in waiting):
                live = asyncio.run(self._live_brokers())
                if {n.node_id for n in waiting} <= live:
                    return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"Kafka nodes {[n.node_id for n in waiting]} did not serve")
            time.sleep(0.3)

    def stop(self) -> None:
        """Stop every node (a paused one is continued first) and remove their data."""
        for node in self.nodes:
            if node.running and node.process is not None:
                node.process.send_signal(signal.SIGCONT)
                node.process.terminate()
        for node in self.nodes:
            stop_process(node.process)
            node.process = None
            node.paused = False
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    # ------------------------------------------------------------------ faults

    def kill(self, node_id: int) -> None:
        """SIGKILL a node: the crash replication must survive."""
        node = self.node(node_id)
        if node.process is not None and node.process.poll() is None:
            node.process.kill()
            node.process.wait()
        node.paused = False

    def restart(self, node_id: int, timeout_s: float = 120.0) -> None:
        """Start a killed (or stopped) node again on its data directory and ports; return
        once it serves as a broker (its replicas may still be catching up: :meth:`wait_in_sync`)."""
        node = self.node(node_id)
        if node.running:
            raise RuntimeError(f"Kafka node {node_id} is still running")
        node.spawn(self._classpath, self.heap)
        self._wait_serving([node], time.monotonic() + timeout_s)

    def pause(self, node_id: int | None = None) -> None:
        """SIGSTOP one node (every node when None)."""
        for node in self.nodes if node_id is None else [self.node(node_id)]:
            if node.running and node.process is not None:
                node.process.send_signal(signal.SIGSTOP)
                node.paused = True

    def resume(self, node_id: int | None = None) -> None:
        """SIGCONT one node (every node when None)."""
        for node in self.nodes if node_id is None else [self.node(node_id)]:
            if node.running and node.process is not None:
                node.process.send_signal(signal.SIGCONT)
            node.paused = False

    # ------------------------------------------------------------------ metadata

    def _admin(self, request_timeout_ms: int = 5000) -> AIOKafkaAdminClient:
        """An admin client of the nodes that serve (a paused one would hold its requests)."""
        serving = [n.bootstrap for n in self.nodes if n.serving] or [self.nodes[0].bootstrap]
        return own_admin_client(",".join(serving), request_timeout_ms)

    async def _live_brokers(self) -> set[int]:
        admin = self._admin(3000)
        try:
            await admin.start()
            described = await admin.describe_cluster()
            return {int(b["node_id"]) for b in described["brokers"]}
        except Exception:
            return set()
        finally:
            await admin.close()

    async def partitions(self, topics: Iterable[str] | None = None) -> list[PartitionState]:
        """Leader, replicas and ISR of every partition of ``topics`` (None: every topic,
        the internal ones too), as a serving node's metadata has them."""
        admin = self._admin()
        try:
            await admin.start()
            described = await admin.describe_topics(None if topics is None else list(topics))
        finally:
            await admin.close()
        found = [
            PartitionState(
                topic=str(topic["topic"]),
                partition=int(p["partition"]),
                leader=int(p["leader"]),
                replicas=tuple(int(r) for r in p["replicas"]),
                isr=tuple(int(r) for r in p["isr"]),
            )
            for topic in described
            for p in topic["partitions"]
        ]
        return sorted(found, key=lambda s: (s.topic, s.partition))

    async def leader(self, topic: str, partition: int) -> int:
        """The node leading ``topic``'s ``partition`` (-1: none)."""
        for state in await self.partitions([topic]):
            if state.partition == partition:
                return state.leader
        raise LookupError(f"no partition {partition} of {topic!r}")

    async def leader_counts(self, topics: Iterable[str]) -> Counter[int]:
        """How many partitions of ``topics`` each node leads."""
        return Counter(s.leader for s in await self.partitions(topics) if s.leader >= 0)

    async def out_of_sync(self, node_id: int) -> list[PartitionState]:
        """The partitions ``node_id`` is a replica of but not in the ISR of."""
        states = await self.partitions()
        return [s for s in states if node_id in s.replicas and node_id not in s.isr]

    async def wait_in_sync(self, node_id: int, timeout_s: float = 120.0) -> float:
        """Seconds until ``node_id`` is in the ISR of every partition it holds a copy of;
        TimeoutError (naming a few of those still missing) past ``timeout_s``."""
        started = time.monotonic()
        missing: list[PartitionState] = []
        while time.monotonic() - started < timeout_s:
            with contextlib.suppress(Exception):  # a node not serving yet: ask again
                missing = await self.out_of_sync(node_id)
                if not missing:
                    return time.monotonic() - started
            await asyncio.sleep(0.5)
        names = ", ".join(f"{s.topic}[{s.partition}]" for s in missing[:5])
        raise TimeoutError(f"node {node_id} not back in the ISR within {timeout_s:g}s: {names}")
