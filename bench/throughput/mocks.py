"""The mock providers, each in its own process: ``llmock`` and the light aiohttp mock."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from app.embedded.broker import free_port
from app.embedded.child_env import child_env
from app.lifetime import die_with_parent, stop_process, wait_listening
from bench.gateway_mock import completion_body
from bench.throughput.workload import MOCK_MODEL

MOCK_KINDS = {"llmock": "llmock (FastAPI/uvicorn)", "light": "light (aiohttp)"}


COMPLETION = completion_body(
    "Hello from the light mock.",
    {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    model=MOCK_MODEL,
)


def serve_light(port: int, latency_ms: float) -> None:
    """The light mock: every POST to ``/v1/chat/completions`` answers one completion after
    ``latency_ms``. Runs until killed."""
    from aiohttp import web

    delay = latency_ms / 1000.0

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        if delay > 0:
            await asyncio.sleep(delay)
        return web.Response(body=COMPLETION, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, backlog=2048)


class MockServer:
    """One mock in its own process on 127.0.0.1."""

    def __init__(self, kind: str, latency_ms: int, log_dir: Path) -> None:
        if kind not in MOCK_KINDS:
            raise ValueError(f"unknown mock {kind!r}; expected one of {', '.join(MOCK_KINDS)}")
        self.kind = kind
        self.latency_ms = latency_ms
        self.port = free_port()
        self.log_path = log_dir / f"throughput-mock-{kind}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def command(self) -> list[str]:
        if self.kind == "llmock":
            return [
                sys.executable,
                "-m",
                "uvicorn",
                "llmock.main:create_app",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--no-access-log",
            ]
        return [
            sys.executable,
            "-m",
            "bench.throughput",
            "serve-light",
            str(self.port),
            str(self.latency_ms),
        ]

    def start(self, timeout_s: float = 20.0) -> MockServer:
        env = child_env(None, {"LLMOCK_LATENCY_MS": str(self.latency_ms)})
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        name = f"mock {self.kind} (log: {self.log_path})"
        try:
            wait_listening(self.process, "127.0.0.1", self.port, timeout_s, name=name)
        except TimeoutError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_process(self.process, 5)
