"""``switchyard up``: the embedded stack in the foreground, until SIGINT or SIGTERM.

It prints one ``name=URL`` line per server once that server accepts connections (the
broker, the worker's web server, the gateway, the console; the simulated providers and
the local model's servers are started before the first line), and ``worker running``
once every worker's ``/readyz`` answers ready, so a script may wait for a line and then
use what it names. A worker that exits first, or is not ready within the timeout, is a
one-line error (with the end of its log) and exit code 1.

With ``--providers FILE`` the stack routes to the providers the file names, and starts no
simulated ones: the file is checked first (one line naming what is wrong, exit 2), then
copied into the stack's work directory, where the gateway's local key is added to the copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.embedded.brokers import BrokerKind
from app.embedded.child_env import child_env
from app.embedded.stack import WORKER_READY_TIMEOUT_S, EmbeddedStack, WorkerNotReady
from app.policy.files import load_config
from app.settings import Settings

if TYPE_CHECKING:
    from app.embedded.local_model import LocalModelServer
    from app.embedded.simulated import SimulatedProviders


@dataclass(frozen=True)
class UpOptions:
    seed: int = 0
    #: The gateway's port (0: any free one).
    gateway_port: int = 0
    #: The gateway's API key (None: ``LOCAL_KEY``, printed).
    api_key: str | None = None
    #: How long the worker may take to answer ready.
    ready_timeout_s: float = WORKER_READY_TIMEOUT_S
    #: The text of the user's providers file (``--providers``); None: simulated providers.
    providers_text: str | None = None
    #: The embedded broker the stack runs on (``--broker``).
    broker: BrokerKind = "tansu"


def user_providers(path: Path, settings: Settings) -> str:
    """``--providers``' file, checked as the worker will check it, in the environment the
    worker will have (its ``${VAR}`` keys included): one ConfigError line."""
    load_config(path, env=child_env(settings))
    return path.read_text(encoding="utf-8")


def run_up(
    settings: Settings,
    options: UpOptions,
    local_models: Sequence[LocalModelServer] = (),
    providers_yaml: Callable[[SimulatedProviders], str] | None = None,
) -> int:
    return asyncio.run(_serve(settings, options, local_models, providers_yaml))


async def _serve(
    settings: Settings,
    options: UpOptions,
    local_models: Sequence[LocalModelServer],
    providers_yaml: Callable[[SimulatedProviders], str] | None,
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    from app.console.server import RunningConsole, start_console
    from app.embedded.broker import free_port
    from app.embedded.simulated import UP_MODELS, demo_providers_yaml
    from app.gateway.run import LOCAL_KEY, start_gateway, with_key

    host = settings.console_host
    console_port = free_port(host)  # the workers redirect /admin/trace to the console
    given = options.providers_text or providers_yaml
    key = options.api_key or LOCAL_KEY

    def keyed(simulated: SimulatedProviders) -> str:
        """The stack's providers file with the gateway's key, before any worker reads it."""
        text = given(simulated) if callable(given) else given or demo_providers_yaml(simulated)
        return with_key(text, key)

    own = options.providers_text
    stack = EmbeddedStack(
        seed=options.seed,
        local_models=local_models,
        providers_yaml=keyed if own is None else with_key(own, key),
        env={"SWITCHYARD_CONSOLE_URL": f"http://{host}:{console_port}"},
        settings=settings,
        simulated=own is None,
        broker_kind=options.broker,
        simulated_models=UP_MODELS,  # the chat providers and route embeddings' ones
    )
    async with stack:
        gateway = await start_gateway(stack.gateway_settings(options.gateway_port))
        console: RunningConsole | None = None
        try:
            started, timeout_s = time.monotonic(), options.ready_timeout_s
            print(f"broker={stack.broker.bootstrap}", flush=True)
            for worker in stack.workers:  # /metrics, /healthz, /readyz, /admin
                if not await _unless(stop, worker.wait_listening(timeout_s, since=started)):
                    return 0
                print(f"web={worker.web_url}", flush=True)
            print(f"gateway={gateway.url}/v1", flush=True)
            console = await start_console(stack.console_settings(), port=console_port)
            print(f"console={console.url}", flush=True)
            print(f"api_key={'(--api-key)' if options.api_key else LOCAL_KEY}", flush=True)
            if stack.simulated:
                for provider_id, url in stack.providers.base_urls().items():
                    print(f"provider {provider_id} {url}", flush=True)
            for local_model in stack.local_models:
                name = "local_judge" if local_model.options.grammar else "local_model"
                print(f"{name}={local_model.base_url}", flush=True)
            print(f"providers file {stack.providers_file}", flush=True)
            for worker in stack.workers:
                if not await _unless(stop, worker.wait_ready(timeout_s, since=started)):
                    return 0
            print("worker running; Ctrl-C to stop", flush=True)
            while not stop.is_set() and all(w.running for w in stack.workers):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=0.5)
            if not stop.is_set():
                print("switchyard: the worker exited", file=sys.stderr)
                return 1
            return 0
        except WorkerNotReady as exc:
            tail = "; the end of its log:" if exc.log_tail else " (its log is empty)"
            print(f"switchyard: {exc}{tail}", file=sys.stderr)
            for line in exc.log_tail:
                print(f"  {line}", file=sys.stderr)
            return 1
        finally:
            # Bounded: a broker that no longer answers holds the gateway's producer (10 s in all).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gateway.stop(), timeout=1.0)
            if console is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(console.stop(), timeout=2.0)


async def _unless(stop: asyncio.Event, waiting: Awaitable[None]) -> bool:
    """Await ``waiting`` unless ``stop`` is set first (False then; ``waiting`` is cancelled)."""
    task = asyncio.ensure_future(waiting)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    for pending in (task, stopped):
        if not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
    if task.done() and not task.cancelled():
        task.result()  # WorkerNotReady
        return True
    return False
