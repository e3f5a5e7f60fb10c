"""The embedded stack: broker, simulated providers and worker processes, on loopback.

Used by ``switchyard demo``, ``switchyard up`` and the end-to-end tests, so all
three exercise the same path a production deployment does: a separate worker
process talking to a broker.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from app.embedded.broker import EmbeddedBroker, free_port
from app.embedded.lifetime import die_with_parent
from app.embedded.simulated import SimulatedProviders, demo_providers_yaml
from app.kafka import ensure_topics
from app.settings import Settings, Topics

if TYPE_CHECKING:
    from app.embedded.local_model import LocalModelServer


#: The broker transport's tuning (fetch waits, linger, the router's local fold; fields
#: of ``Settings``): the processes the stack starts take these from the calling
#: environment, other ``SWITCHYARD_*`` variables they do not, so a bench can compare
#: them in every process.
TRANSPORT_TUNING_ENV = (
    "SWITCHYARD_FETCH_MAX_WAIT_MS",
    "SWITCHYARD_FETCH_IDLE_WAIT_MS",
    "SWITCHYARD_PRODUCER_LINGER_MS",
    "SWITCHYARD_ROUTER_LOCAL_FOLD",
    "SWITCHYARD_FAST_DELIVERY",
)


def namespaced_topics(namespace: str) -> Topics:
    """The default topic names, prefixed, so several stacks can share one broker."""
    if not namespace:
        return Topics()
    return Topics(**{name: f"{namespace}.{value}" for name, value in Topics().model_dump().items()})


#: How long an embedded worker may take to stop (``SWITCHYARD_SHUTDOWN_TIMEOUT_S``), and
#: how long ``Worker.stop`` waits before SIGKILL: with the broker's and the gateway's stop,
#: ``switchyard up`` and the demo are gone within 10 s of SIGTERM or SIGINT (issue 16 §5).
WORKER_SHUTDOWN_S = 6.0
WORKER_KILL_AFTER_S = 7.0


class Worker:
    """A ``switchyard worker`` child process."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        log.close()
        return self

    @property
    def web_url(self) -> str:
        """Where the worker serves ``/metrics``, ``/healthz``, ``/readyz`` and ``/admin``."""
        host = self.env.get("SWITCHYARD_WEB_HOST", "127.0.0.1")
        return f"http://{host}:{self.env.get('SWITCHYARD_WEB_PORT', '6066')}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the crash the at-least-once design must survive."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    def stop(self, timeout_s: float = WORKER_KILL_AFTER_S) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()


class EmbeddedStack:
    def __init__(
        self,
        *,
        seed: int = 0,
        time_scale: float = 1.0,
        partitions: int = 4,
        env: dict[str, str] | None = None,
        workdir: Path | None = None,
        broker: EmbeddedBroker | None = None,
        namespace: str = "",
        providers_yaml: str | Callable[[SimulatedProviders], str] | None = None,
        detect_broker: bool = False,
        local_models: Sequence[LocalModelServer] = (),
    ) -> None:
        self._own_broker = broker is None
        self.broker = broker or EmbeddedBroker()
        self.namespace = namespace
        self.topics = namespaced_topics(namespace)
        #: Route to these providers instead of the simulated ones (e.g. llmock servers).
        self.providers_yaml = providers_yaml
        self.providers = SimulatedProviders(seed=seed, time_scale=time_scale)
        self.partitions = partitions
        self.extra_env = env or {}
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="switchyard-"))
        self.workers: list[Worker] = []
        #: Let workers find out how the broker answers fetches (app/compat/detect.py)
        #: instead of being told: about a second more per worker start.
        self.detect_broker = detect_broker
        #: llama-server processes (app/embedded/local_model.py): started before the
        #: providers file is written (``providers_yaml`` names them), stopped with the stack.
        self.local_models = list(local_models)

    @property
    def providers_file(self) -> Path:
        return self.workdir / "providers.yaml"

    def worker_env(self, index: int) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("SWITCHYARD_") or k in TRANSPORT_TUNING_ENV
        }
        env.update(
            SWITCHYARD_BROKER=self.broker.url,
            SWITCHYARD_PROVIDERS=str(self.providers_file),
            SWITCHYARD_DATA_DIR=str(self.workdir / f"worker-{index}"),
            SWITCHYARD_WEB_PORT=str(free_port()),
            SWITCHYARD_PARTITIONS=str(self.partitions),
            SWITCHYARD_APP_ID=f"switchyard-{self.namespace}" if self.namespace else "switchyard",
        )
        if not self.detect_broker:
            env["SWITCHYARD_TANSU_COMPAT"] = "1"
        env["SWITCHYARD_SHUTDOWN_TIMEOUT_S"] = str(WORKER_SHUTDOWN_S)
        for name, topic in self.topics.model_dump().items():
            env[f"SWITCHYARD_TOPIC_{name.upper()}"] = topic
        env.update(self.extra_env)
        return env

    def settings(self) -> Settings:
        return Settings(broker=self.broker.url, partitions=self.partitions, topics=self.topics)

    def gateway_settings(self, port: int = 0) -> Settings:
        """Settings of a gateway (app/gateway/) in front of this stack, on ``port`` (0: any)."""
        update = {"providers": self.providers_file, "gateway_port": port}
        return self.settings().model_copy(update=update)

    async def start(self, workers: int = 1) -> EmbeddedStack:
        if self.local_models:  # first: one that fails to start leaves nothing behind
            from app.embedded.local_model import start_all

            await start_all(self.local_models)
        if self._own_broker:
            await asyncio.to_thread(self.broker.start)
        await self.providers.start()
        if callable(self.providers_yaml):
            config = self.providers_yaml(self.providers)
        else:
            config = self.providers_yaml or demo_providers_yaml(self.providers)
        self.providers_file.write_text(config, encoding="utf-8")
        await ensure_topics(self.settings())
        for _ in range(workers):
            self.add_worker()
        return self

    def add_worker(self) -> Worker:
        index = len(self.workers)
        worker = Worker(self.worker_env(index), self.workdir / f"worker-{index}.log").start()
        self.workers.append(worker)
        return worker

    async def stop(self) -> None:
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in self.workers))
        await self.providers.stop()
        await asyncio.gather(*(asyncio.to_thread(m.stop) for m in self.local_models))
        if self._own_broker:
            self.broker.resume()  # a broker stopped by SIGSTOP could not act on SIGTERM
            self.broker.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    async def __aenter__(self) -> EmbeddedStack:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
