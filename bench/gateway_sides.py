"""The processes of ``switchyard bench gateway``: the mock, Switchyard's gateway (in front of
the embedded stack) and the LiteLLM proxy, each in its own process, all stopped at the end.

:class:`Side` is what the load driver needs of each: a base URL, the model name to ask,
the API key, and the processes whose CPU counts for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from app.embedded.broker import free_port
from app.embedded.child_env import child_env
from app.embedded.stack import EmbeddedStack
from app.gateway.run import LOCAL_KEY, add_local_key
from app.lifetime import die_with_parent, stop_process, wait_listening
from bench.gateway_mock import MODEL


@dataclass
class Side:
    name: str
    base_url: str
    model: str
    api_key: str
    #: Processes whose CPU is this side's (name -> pid).
    pids: dict[str, int] = field(default_factory=dict)


class Process:
    """A child process with its log in ``workdir``; killed with its parent."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], workdir: Path) -> None:
        self.name = name
        with (workdir / f"{name}.log").open("ab") as log:
            self.popen = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill(self) -> None:
        """SIGKILL, and reap."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()

    def stop(self, timeout_s: float = 10.0) -> None:
        stop_process(self.popen, timeout_s)


@dataclass
class Run:
    """A bench run's work dir and what it started there: child processes and the stack."""

    workdir: Path
    processes: list[Process] = field(default_factory=list)
    stack: EmbeddedStack | None = None

    def mock(self, latency_ms: int) -> str:
        """The mock provider, answering after ``latency_ms``: its base URL."""
        mock, mock_url = start_mock(latency_ms, self.workdir)
        self.processes.append(mock)
        return mock_url

    async def start_stack(self, mock_url: str) -> EmbeddedStack:
        """The embedded stack (one worker) routing to the mock, the local key allowed."""
        (self.workdir / "stack").mkdir()
        self.stack = EmbeddedStack(
            workdir=self.workdir / "stack", providers_yaml=providers_yaml(mock_url)
        )
        await self.stack.start(workers=1)
        allow_local_key(self.stack)
        return self.stack


@contextlib.asynccontextmanager
async def bench_run(prefix: str) -> AsyncIterator[Run]:
    """A :class:`Run` in a new temporary dir; at the end its processes are stopped (the
    last started first), then its stack, and the dir removed."""
    run = Run(Path(tempfile.mkdtemp(prefix=prefix)))
    try:
        yield run
    finally:
        for process in reversed(run.processes):
            process.stop()
        if run.stack is not None:
            await run.stack.stop()
        shutil.rmtree(run.workdir, ignore_errors=True)


def start_mock(latency_ms: int, workdir: Path) -> tuple[Process, str]:
    port = free_port()
    command = [sys.executable, "-m", "bench.gateway_mock", str(port), str(latency_ms)]
    mock = Process("mock", command, child_env(None), workdir)
    wait_listening(mock.popen, "127.0.0.1", port, 20.0, name=f"{mock.name} (see its log)")
    return mock, f"http://127.0.0.1:{port}/v1"


def providers_yaml(mock_url: str) -> str:
    provider = {"id": "mock", "base_url": mock_url, "max_concurrency": 1000, "timeout_ms": 30_000}
    provider["models"] = [{"name": MODEL}]
    routes = {"chat": {"providers": ["mock"]}}
    return str(yaml.safe_dump({"providers": [provider], "routes": routes}))


def start_gateway(stack: EmbeddedStack, workdir: Path, port: int, partition: int = 0) -> Process:
    """``switchyard gateway`` in front of ``stack``, on ``port``, owning reply ``partition``."""
    env = {
        **stack.worker_env(99),  # the stack's broker, topics and the inherited settings
        "SWITCHYARD_GATEWAY_PORT": str(port),
        "SWITCHYARD_GATEWAY_REPLY_PARTITIONS": f"[{partition}]",
    }
    return Process("gateway", [sys.executable, "-m", "app.cli", "gateway"], env, workdir)


def allow_local_key(stack: EmbeddedStack) -> None:
    """Let ``LOCAL_KEY`` into the gateways of ``stack`` (before the first one starts)."""
    add_local_key(stack.providers_file, LOCAL_KEY)


def switchyard_side(stack: EmbeddedStack, gateway: Process, port: int) -> Side:
    pids = {"gateway": gateway.pid, "worker": _worker_pid(stack)}
    return Side("switchyard", f"http://127.0.0.1:{port}/v1", "chat", LOCAL_KEY, pids)


def _worker_pid(stack: EmbeddedStack) -> int:
    process = stack.workers[0].process
    assert process is not None
    return process.pid


def start_litellm(mock_url: str, workdir: Path) -> tuple[Process, Side]:
    """The LiteLLM proxy (``litellm --config``) routing ``chat`` to the mock, with a master
    key (it refuses to start without one) and the local cost map (no network).

    The mock serves chat completions only, as most OpenAI-compatible servers do; for an
    ``openai/`` model LiteLLM would send a Responses request, and a Messages request too, to
    the provider's own ``/v1/responses`` (a 404 here): both flags below make it translate
    them to chat completions, as Switchyard's gateway does."""
    params = {
        "model": f"openai/{MODEL}",
        "api_base": mock_url,
        "api_key": "sk-mock",
        "use_chat_completions_api": True,
    }
    settings = {
        "telemetry": False,
        "drop_params": True,
        "use_chat_completions_url_for_anthropic_messages": True,
    }
    config = {
        "model_list": [{"model_name": "chat", "litellm_params": params}],
        "litellm_settings": settings,
    }
    path = workdir / "litellm.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    key = f"sk-bench-{secrets.token_hex(16)}"
    port = free_port()
    env = child_env(
        None,
        {
            "LITELLM_MASTER_KEY": key,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "ERROR",
            "LITELLM_TELEMETRY": "False",
        },
    )
    litellm = str(Path(sys.executable).with_name("litellm"))
    command = [litellm, "--config", str(path), "--host", "127.0.0.1", "--port", str(port)]
    process = Process("litellm", command, env, workdir)
    side = Side("litellm", f"http://127.0.0.1:{port}/v1", "chat", key, {"proxy": process.pid})
    return process, side


def litellm_unavailable() -> str | None:
    """Why the LiteLLM proxy cannot run here (None: it can)."""
    if not Path(sys.executable).with_name("litellm").exists():
        return "the litellm command is not installed (pip install 'litellm[proxy]')"
    found = subprocess.run(
        [sys.executable, "-c", "import litellm.proxy.proxy_server"],
        capture_output=True,
        text=True,
        env=child_env(None, {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}),
        check=False,
        timeout=120,
    )
    if found.returncode != 0:
        lines = found.stderr.strip().splitlines()
        return f"the LiteLLM proxy does not import: {lines[-1] if lines else found.returncode}"
    return None


async def wait_healthy(url: str, process: Process, timeout_s: float = 120.0) -> None:
    """Until ``url`` answers 200 (the process must stay up)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient() as http:
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise RuntimeError(f"{process.name} exited; see its log")
            try:
                if (await http.get(url, timeout=2)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.5)
    raise TimeoutError(f"{process.name} not healthy within {timeout_s:g}s")
