"""A real Apache Kafka (KRaft, one node) for tests and ``switchyard up``, from Maven Central.

The jars of ``org.apache.kafka:kafka_2.13`` and its runtime dependencies are resolved once
with Maven into a cache outside the repository (``~/.cache/switchyard/kafka-<version>/libs``,
or ``$SWITCHYARD_KAFKA_CACHE``). The JVM dies with the process that started it
(``PR_SET_PDEATHSIG``), even when that process is SIGKILLed.

``python -m app.embedded.kafka --resolve`` fills the cache (CI runs it before the tests).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from app.embedded.broker import BrokerProcess, free_port
from app.embedded.child_env import child_env
from app.lifetime import die_with_parent

if TYPE_CHECKING:
    from aiokafka.admin import AIOKafkaAdminClient

#: The pinned Kafka release.
KAFKA_VERSION = "4.4.0"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>switchyard</groupId><artifactId>kafka-runtime</artifactId><version>0</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId>
      <version>2.25.5</version>
    </dependency>
  </dependencies>
</project>
"""


def cache_dir(version: str = KAFKA_VERSION) -> Path:
    base = os.environ.get("SWITCHYARD_KAFKA_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "switchyard"
    return root / f"kafka-{version}"


def resolve(version: str = KAFKA_VERSION) -> Path:
    """The ``libs`` folder of ``version``, resolved with Maven the first time (idempotent)."""
    target = cache_dir(version)
    libs = target / "libs"
    if _cached(version):
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (mvn) is needed to resolve Kafka's jars")
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_POM.format(version=version))
        subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={libs}",
            ],
            check=True,
        )
    (target / "COMPLETE").write_text(version + "\n")
    return libs


def _cached(version: str = KAFKA_VERSION) -> bool:
    """The jars of ``version`` are in the cache, complete."""
    target = cache_dir(version)
    return (target / "COMPLETE").exists() and any((target / "libs").glob("kafka_2.13-*.jar"))


def available() -> bool:
    """True when Kafka can run here: a JDK, and the jars cached or Maven to resolve them."""
    if shutil.which("java") is None:
        return False
    return _cached() or shutil.which("mvn") is not None


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("a JDK (java) is needed to run Kafka")
    return java


def jvm_options(heap: str = "384m") -> list[str]:
    """The options of every Kafka JVM here: a small heap, serial GC, quick start."""
    return [
        f"-Xmx{heap}",
        "-Xms64m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Djava.awt.headless=true",
        # IPv4 sockets: the listeners bind 127.0.0.1, not its IPv6-mapped form.
        "-Djava.net.preferIPv4Stack=true",
    ]


def kafka_classpath() -> str:
    """The cached jars (resolved the first time) as a ``-cp`` argument."""
    return os.pathsep.join(str(p) for p in sorted(resolve().glob("*.jar")))


def new_cluster_id() -> str:
    """A KRaft cluster id (22 characters of base64's alphabet)."""
    return uuid.uuid4().hex[:22]


def format_storage_command(classpath: str, props: Path, cluster_id: str, heap: str) -> list[str]:
    """``kafka-storage format`` of the log dirs ``props`` names, for ``cluster_id``."""
    return [
        _java(),
        *jvm_options(heap),
        "-cp",
        classpath,
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(props),
    ]


def server_command(classpath: str, props: Path, heap: str) -> list[str]:
    """A Kafka server of ``props``."""
    return [_java(), *jvm_options(heap), "-cp", classpath, "kafka.Kafka", str(props)]


def spawn_jvm(command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own session, output to ``log_path``; it dies with this process
    (``PR_SET_PDEATHSIG``) and gets none of Switchyard's settings."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            command,
            env=child_env(None),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


def own_admin_client(bootstrap: str, request_timeout_ms: int = 5000) -> AIOKafkaAdminClient:
    """An admin client of a broker this process launched: plaintext on loopback (the user's
    ``SWITCHYARD_KAFKA_*`` security describes the user's cluster, never this one)."""
    from aiokafka.admin import AIOKafkaAdminClient

    return AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=request_timeout_ms)


def kafka_answers(host: str, port: int, timeout_ms: int = 3000) -> bool:
    """The broker on ``host:port`` accepts a connection and answers a metadata request."""
    try:
        socket.create_connection((host, port), timeout=0.2).close()
    except OSError:
        return False

    async def probe() -> bool:
        admin = own_admin_client(f"{host}:{port}", timeout_ms)
        try:
            await admin.start()
            await admin.list_topics()
            return True
        except Exception:
            return False
        finally:
            await admin.close()

    return asyncio.run(probe())


#: What every Kafka node here is set to: quick group joins, room for the largest request's
#: records, few threads (two cores run the broker, the workers and the driver).
SMALL_SERVER_SETTINGS: tuple[str, ...] = (
    "group.initial.rebalance.delay.ms=0",
    "auto.create.topics.enable=true",
    "message.max.bytes=1310720",
    "replica.fetch.max.bytes=1310720",
    "num.network.threads=2",
    "num.io.threads=2",
    "background.threads=2",
    "log.cleaner.threads=1",
)


class KafkaBroker(BrokerProcess):
    """Apache Kafka in KRaft mode (controller+broker) on loopback."""

    is_tansu = False

    def __init__(self, host: str = "127.0.0.1", port: int | None = None) -> None:
        super().__init__(host, port)
        self.controller_port = free_port(host)
        self.heap = "384m"
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _config(self, data: Path) -> str:
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@{self.host}:{self.controller_port}",
                f"listeners=PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://{self.bootstrap}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={data / 'logs'}",
                "num.partitions=1",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=4",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                *SMALL_SERVER_SETTINGS,
                "",
            ]
        )

    def start(self, timeout_s: float = 60.0) -> KafkaBroker:
        classpath = kafka_classpath()
        self._dir = tempfile.TemporaryDirectory(prefix="switchyard-kafka-")
        data = Path(self._dir.name)
        props = data / "server.properties"
        props.write_text(self._config(data))
        subprocess.run(
            format_storage_command(classpath, props, new_cluster_id(), self.heap),
            env=child_env(None),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
            timeout=120,
        )
        self._process = spawn_jvm(server_command(classpath, props, self.heap), data / "kafka.log")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"Kafka exited with code {self._process.returncode}")
            if self._answers():
                return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"Kafka did not answer on {self.bootstrap} in {timeout_s}s")

    def _answers(self) -> bool:
        return kafka_answers(self.host, self.port)

    def stop(self) -> None:
        super().stop()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.embedded.kafka")
    parser.add_argument(
        "--resolve", action="store_true", help="resolve Kafka's jars into the cache"
    )
    args = parser.parse_args(argv)
    if args.resolve:
        print(resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
