"""Start and stop a gateway: ``switchyard gateway``, ``switchyard up`` and the tests."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path

import yaml
from aiohttp import web

from app.config.schema import ConfigError
from app.gateway.head_timeout import HeadTimedSite
from app.gateway.keys import hash_key
from app.gateway.server import build_app
from app.gateway.service import Gateway
from app.kafka import ensure_topics
from app.policy.files import load_config
from app.settings import Settings

#: Idle keep-alive connections are closed after this long.
KEEPALIVE_TIMEOUT_S = 30.0
#: Longest request line and header field (aiohttp refuses longer ones with 400).
MAX_LINE_BYTES = 8190


class RunningGateway:
    """A started gateway and its HTTP server."""

    def __init__(self, gateway: Gateway, runner: web.AppRunner, url: str) -> None:
        self.gateway = gateway
        self.runner = runner
        self.url = url

    async def stop(self) -> None:
        await self.runner.cleanup()
        await self.gateway.stop()


async def start_gateway(settings: Settings) -> RunningGateway:
    """Make the topics, start the gateway and listen on ``gateway_host:gateway_port``."""
    config = load_config(settings.providers)
    await ensure_topics(settings)
    gateway = await Gateway(settings, config).start()
    runner = web.AppRunner(
        build_app(gateway),
        access_log=None,  # no request lines: nothing about a request leaves it
        keepalive_timeout=KEEPALIVE_TIMEOUT_S,
        max_line_size=MAX_LINE_BYTES,
        max_field_size=MAX_LINE_BYTES,
    )
    await runner.setup()
    site = HeadTimedSite(
        runner,
        settings.gateway_host,
        settings.gateway_port,
        header_timeout_s=settings.gateway_header_timeout_s,
    )
    await site.start()
    host, port = runner.addresses[0][:2]
    return RunningGateway(gateway, runner, f"http://{host}:{port}")


async def serve(settings: Settings) -> None:
    """Run until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    running = await start_gateway(settings)
    print(f"gateway={running.url}", flush=True)
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await running.stop()


#: The API key of ``switchyard up``'s gateway unless ``--api-key`` names another (loopback only).
LOCAL_KEY = "sk-switchyard-local"


def add_local_key(providers_file: Path, key: str) -> None:
    """Let ``key`` into the embedded stack's gateway: its hash joins the file's
    ``gateway_keys`` (those already there are kept). The file is rewritten: give it the
    stack's copy, never a user's own."""
    text = providers_file.read_text(encoding="utf-8")
    providers_file.write_text(with_key(text, key, source=str(providers_file)), encoding="utf-8")


def with_key(text: str, key: str, source: str = "providers file") -> str:
    """A providers document with ``key``'s hash added to its ``gateway_keys`` (as
    ``local``): written before any worker reads it, so the first policy version has it."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level is not a mapping")
    keys = data.get("gateway_keys") or []
    if not isinstance(keys, list):
        raise ConfigError(f"{source}: gateway_keys is not a list")
    data["gateway_keys"] = [*keys, {"sha256": hash_key(key), "name": "local"}]
    return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def hash_key_from_stdin() -> int:
    """``switchyard gateway --hash-key``: the SHA-256 to put in ``gateway_keys``."""
    key = sys.stdin.readline().strip()
    if not key:
        print("switchyard: no key on stdin", file=sys.stderr)
        return 2
    print(hash_key(key))
    return 0
