"""``switchyard console``: the routing console's pages, with the analytics sink folding
the recorded topics into their store (``--no-sink``: an existing store, read-only).

Exit codes: 0 done, 2 the store or the broker could not be used.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from app.analytics.commands import add_store_options, stop_on_signals, store_settings


def console_command(args: argparse.Namespace) -> int:
    import duckdb

    from app.console.server import start_console

    settings = store_settings(args)

    async def run() -> None:
        stop = stop_on_signals()
        console = await start_console(
            settings, sink=not args.no_sink, host=args.host, port=args.port
        )
        print(f"console={console.url}", flush=True)
        try:
            await stop.wait()
        finally:
            await console.stop()

    try:
        asyncio.run(run())
    except duckdb.IOException as exc:
        print(f"switchyard: cannot open the analytics store: {exc}", file=sys.stderr)
        return 2
    return 0


def register(commands: Any) -> None:
    """Add ``console`` to ``switchyard``'s subparsers."""
    console = commands.add_parser(
        "console", help="the routing console: request log, request pages, provider health"
    )
    add_store_options(console)
    console.add_argument("--host", default=None, help="default: SWITCHYARD_CONSOLE_HOST")
    console.add_argument("--port", type=int, default=None, help="default: SWITCHYARD_CONSOLE_PORT")
    console.add_argument(
        "--no-sink", action="store_true", help="serve an existing store read-only, fold nothing"
    )
    console.set_defaults(run=console_command)
