"""``switchyard analytics``: the sink alone (the console's command: app/console/commands.py).

Exit codes: 0 done, 2 the store or the broker could not be used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from app.settings import Settings, get_settings


def store_settings(args: argparse.Namespace) -> Settings:
    settings = get_settings()
    update: dict[str, Any] = {}
    if args.db is not None:
        update["analytics_db"] = args.db
    if getattr(args, "broker", None):
        update["broker"] = args.broker
    return settings.model_copy(update=update)


def stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop


def analytics_command(args: argparse.Namespace) -> int:
    import duckdb

    from app.analytics.sink import Sink
    from app.analytics.store import Applied, Store

    settings = store_settings(args)

    def progress(total: Applied) -> None:
        if args.progress:
            print(f"folded {total.folded} records", flush=True)

    async def run() -> dict[str, Any]:
        stop = stop_on_signals()
        store = Store(settings.analytics_db)
        try:
            sink = Sink(store, settings, batch_max=args.batch_max, on_batch=progress)
            total = await sink.run(stop, until_end=args.once)
            return {"folded": total.folded, "skipped": total.skipped, "rows": store.counts()}
        finally:
            store.close()

    try:
        summary = asyncio.run(run())
    except duckdb.IOException as exc:
        print(f"switchyard: cannot open the analytics store: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        rows = ", ".join(f"{name} {n}" for name, n in summary["rows"].items())
        print(f"analytics store {settings.analytics_db}: {rows}")
    return 0


def register(commands: Any) -> None:
    """Add ``analytics`` to ``switchyard``'s subparsers."""
    analytics = commands.add_parser(
        "analytics", help="fold the recorded topics into the analytics store (DuckDB)"
    )
    add_store_options(analytics)
    analytics.add_argument(
        "--once", action="store_true", help="stop at the end offsets seen at the start"
    )
    analytics.add_argument("--progress", action="store_true", help="a line per batch folded")
    analytics.add_argument(
        "--batch-max", type=int, default=5000, help="most records folded per transaction"
    )
    analytics.add_argument("--json", action="store_true", help="one JSON summary line")
    analytics.set_defaults(run=analytics_command)


def add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", type=Path, default=None, help="the DuckDB file (default: SWITCHYARD_ANALYTICS_DB)"
    )
    parser.add_argument(
        "--broker", help="host:port of the Kafka cluster (default: SWITCHYARD_BROKER)"
    )
