"""The embedded stack: broker, simulated providers and worker processes, on loopback.

Used by ``switchyard demo``, ``switchyard up`` and the end-to-end tests, so all
three exercise the same path a production deployment does: a separate worker
process talking to a broker.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from app.embedded.broker import free_port
from app.embedded.brokers import AnyBroker, BrokerKind, embedded_broker
from app.embedded.child_env import SETTINGS_PREFIX, child_env
from app.embedded.child_env import TRANSPORT_TUNING_ENV as TRANSPORT_TUNING_ENV
from app.embedded.kafka_cluster import KafkaCluster
from app.embedded.simulated import (
    SEED_003_MODELS,
    SimulatedModel,
    SimulatedProviders,
    demo_providers_yaml,
)
from app.kafka import ensure_topics
from app.lifetime import AsyncStarted, die_with_parent
from app.settings import Settings, Topics

if TYPE_CHECKING:
    from app.embedded.local_model import LocalModelServer

#: How long ``switchyard up`` waits for its worker to answer ready (``--ready-timeout``).
WORKER_READY_TIMEOUT_S = 120.0


def namespaced_topics(namespace: str) -> Topics:
    """The default topic names, prefixed, so several stacks can share one broker."""
    if not namespace:
        return Topics()
    return Topics(**{name: f"{namespace}.{value}" for name, value in Topics().model_dump().items()})


#: How long an embedded worker may take to stop (``SWITCHYARD_SHUTDOWN_TIMEOUT_S``), and
#: how long ``Worker.stop`` waits before SIGKILL: with the broker's and the gateway's stop,
#: ``switchyard up`` and the demo are gone within 10 s of SIGTERM or SIGINT
#: (docs/design.md#robustness).
WORKER_SHUTDOWN_S = 6.0
WORKER_KILL_AFTER_S = 7.0


class WorkerNotReady(RuntimeError):
    """A worker exited, or did not get ready in time, while it was waited for."""

    def __init__(self, message: str, log_tail: list[str]) -> None:
        super().__init__(message)
        #: The last lines of its log, when it failed.
        self.log_tail = log_tail


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
    def admin_headers(self) -> dict[str, str]:
        """The ``Authorization`` header of the worker's admin views (none without a token)."""
        token = self.env.get("SWITCHYARD_ADMIN_TOKEN")
        return {"Authorization": f"Bearer {token}"} if token else {}

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    async def wait_listening(
        self, timeout_s: float = WORKER_READY_TIMEOUT_S, *, since: float | None = None
    ) -> None:
        """Until the worker's web server accepts connections (any answer of ``/healthz``);
        ``timeout_s`` counts from ``since`` (``time.monotonic()``; default: now)."""
        await self._wait_for("accepting connections", self._accepting, timeout_s, since)

    async def wait_ready(
        self, timeout_s: float = WORKER_READY_TIMEOUT_S, *, since: float | None = None
    ) -> None:
        """Until ``/readyz`` answers 200: partitions assigned, tables recovered."""
        await self._wait_for("ready", self._ready, timeout_s, since)

    async def _accepting(self, client: httpx.AsyncClient) -> str | None:
        try:
            await client.get(f"{self.web_url}/healthz")
        except httpx.TransportError:
            return "not listening"
        return None

    async def _ready(self, client: httpx.AsyncClient) -> str | None:
        try:
            reply = await client.get(f"{self.web_url}/readyz")
        except httpx.TransportError:
            return "not listening"
        if reply.status_code == 200:
            return None
        try:
            return str(reply.json()["status"])
        except (ValueError, KeyError, TypeError):
            return f"HTTP {reply.status_code}"

    async def _wait_for(
        self,
        what: str,
        probe: Callable[[httpx.AsyncClient], Awaitable[str | None]],
        timeout_s: float,
        since: float | None,
    ) -> None:
        """Poll ``probe`` (None: done; else where the worker is) until done; raise
        :class:`WorkerNotReady` when the process exits or ``timeout_s`` passes."""
        deadline = (time.monotonic() if since is None else since) + timeout_s
        async with httpx.AsyncClient(
            timeout=2.0, trust_env=False, headers=self.admin_headers
        ) as client:
            while True:
                if self.process is None or self.process.poll() is not None:
                    code = None if self.process is None else self.process.returncode
                    message = f"the worker exited with code {code} before it was {what}"
                    raise WorkerNotReady(message, self.log_tail())
                where = await probe(client)
                if where is None:
                    return
                if time.monotonic() >= deadline:
                    message = f"the worker was not {what} within {timeout_s:.3g} s ({where})"
                    raise WorkerNotReady(message, self.log_tail())
                await asyncio.sleep(0.1)

    def log_tail(self, lines: int = 20) -> list[str]:
        """The last lines of the worker's log (a worker logs no request content)."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        return text.splitlines()[-lines:]

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


class EmbeddedStack(AsyncStarted):
    """Broker, providers and workers on ``host`` (loopback by default).

    ``settings``: the caller's (default: read from the environment when a worker starts);
    the workers get what of them concerns every Switchyard process (app/embedded/child_env.py),
    the gateway and console :meth:`gateway_settings` and :meth:`settings`.
    ``simulated=False``: no simulated providers (``providers_yaml`` names the providers);
    ``simulated_models``: the ones simulated (the reference chat providers by default).
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        time_scale: float = 1.0,
        partitions: int = 4,
        env: dict[str, str] | None = None,
        workdir: Path | None = None,
        broker: AnyBroker | None = None,
        broker_kind: BrokerKind = "tansu",
        namespace: str = "",
        providers_yaml: str | Callable[[SimulatedProviders], str] | None = None,
        detect_broker: bool = False,
        local_models: Sequence[LocalModelServer] = (),
        settings: Settings | None = None,
        simulated: bool = True,
        host: str = "127.0.0.1",
        simulated_models: Sequence[SimulatedModel] = SEED_003_MODELS,
    ) -> None:
        if not simulated and not isinstance(providers_yaml, str):
            raise ValueError("without simulated providers, providers_yaml names the providers")
        self._own_broker = broker is None
        #: The broker given, or one of ``broker_kind`` the stack starts and stops.
        self.broker: AnyBroker = broker or embedded_broker(broker_kind, host)
        self.namespace = namespace
        self.topics = namespaced_topics(namespace)
        #: Route to these providers instead of the simulated ones (e.g. llmock servers).
        self.providers_yaml = providers_yaml
        self.providers = SimulatedProviders(
            simulated_models, seed=seed, time_scale=time_scale, host=host
        )
        self.simulated = simulated
        self.partitions = partitions
        self.extra_env = env or {}
        self._settings = settings
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

    def caller_settings(self) -> Settings:
        """The settings the stack was given, or this environment's as it is now."""
        return self._settings if self._settings is not None else Settings()

    def worker_env(self, index: int) -> dict[str, str]:
        settings = self.caller_settings()
        own = {
            "SWITCHYARD_BROKER": self.broker.url,
            "SWITCHYARD_PROVIDERS": str(self.providers_file),
            "SWITCHYARD_DATA_DIR": str(self.workdir / f"worker-{index}"),
            "SWITCHYARD_WEB_PORT": str(free_port(settings.web_host)),
            "SWITCHYARD_PARTITIONS": str(self.partitions),
            "SWITCHYARD_APP_ID": f"switchyard-{self.namespace}" if self.namespace else "switchyard",
            "SWITCHYARD_SHUTDOWN_TIMEOUT_S": str(WORKER_SHUTDOWN_S),
        }
        for name, value in self.replication().items():
            own[f"{SETTINGS_PREFIX}{name.upper()}"] = str(value)
        if not self.detect_broker:
            own["SWITCHYARD_TANSU_COMPAT"] = "1" if self.broker.is_tansu else "0"
        for name, topic in self.topics.model_dump().items():
            own[f"SWITCHYARD_TOPIC_{name.upper()}"] = topic
        return child_env(settings, {**own, **self.extra_env})

    def replication(self) -> dict[str, int]:
        """``replication_factor`` and ``min_insync_replicas`` of a replicated cluster (3 and 2),
        which the workers and the topics the stack creates take; none on a single node,
        where the caller's settings hold."""
        if isinstance(self.broker, KafkaCluster):
            return {
                "replication_factor": self.broker.replication_factor,
                "min_insync_replicas": self.broker.min_insync_replicas,
            }
        return {}

    def settings(self) -> Settings:
        """The caller's settings on this stack's broker, partitions, topics and replication."""
        update: dict[str, object] = {
            "broker": self.broker.url,
            "partitions": self.partitions,
            "topics": self.topics,
            **self.replication(),
        }
        return self.caller_settings().model_copy(update=update)

    def console_settings(self) -> Settings:
        """Settings of the routing console (app/console/) over this stack: its store in the
        stack's work dir, the broker's workarounds as the workers have them."""
        update = {
            "analytics_db": self.workdir / "analytics.duckdb",
            "tansu_compat": self.broker.is_tansu,
        }
        return self.settings().model_copy(update=update)

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
        if self.simulated:
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
        await self.providers.stop()  # a no-op when not started
        await asyncio.gather(*(asyncio.to_thread(m.stop) for m in self.local_models))
        if self._own_broker:
            self.broker.resume()  # a broker stopped by SIGSTOP could not act on SIGTERM
            self.broker.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
