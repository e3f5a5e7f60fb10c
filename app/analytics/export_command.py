"""``switchyard export``: the recorded streams as JSON Lines (what ``replay`` reads back,
app/audit/export.py), or the analytics store's tables as Parquet (app/analytics/parquet.py).

It stands above both packages, so neither imports the other's writer. Exit codes: 0
done, 2 the log, the store or the directory could not be used.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.audit.commands import (
    UsageError,
    add_policy_arguments,
    add_source_arguments,
    guarded,
    load_log,
    load_policy,
)
from app.config.schema import ConfigError
from app.settings import get_settings


def export_command(args: argparse.Namespace) -> int:
    from app.audit.export import write_export, write_policy

    if args.format == "parquet":
        return _export_parquet(args)
    log = load_log(args)
    manifest = write_export(log, args.directory, get_settings().topics, redact=args.redact)
    counts = ", ".join(f"{name} {n}" for name, n in manifest["counts"].items())
    print(f"exported {log.source} to {args.directory}: {counts}")
    try:
        policy = load_policy(args.providers)
    except ConfigError as exc:
        print(f"policy.json not written ({exc}): replay it with --providers", file=sys.stderr)
    else:
        write_policy(policy, args.directory)
        print(f"policy.json: config_hash {policy.config_hash}")
    return 0


def _export_parquet(args: argparse.Namespace) -> int:
    """The analytics store's tables as Parquet (docs/analytics.md)."""
    import duckdb

    from app.analytics.parquet import write_parquet_export

    log = None if args.store is not None else load_log(args)
    try:
        counts = write_parquet_export(log, args.directory, get_settings().topics, args.store)
    except duckdb.Error as exc:  # a store another process has open, a directory not writable
        raise UsageError(f"cannot export the analytics tables: {exc}") from None
    rows = ", ".join(f"{name} {n}" for name, n in counts.items())
    print(f"exported the analytics tables to {args.directory} (Parquet): {rows}")
    return 0


def register(commands: Any) -> None:
    """Add ``export`` to ``switchyard``'s subparsers."""
    export = commands.add_parser("export", help="write the recorded streams as JSON Lines")
    export.add_argument("directory", type=Path)
    add_source_arguments(export)
    add_policy_arguments(export)
    export.add_argument(
        "--redact", action="store_true", help="blank prompt and completion text in the export"
    )
    export.add_argument(
        "--format",
        choices=("jsonl", "parquet"),
        default="jsonl",
        help="jsonl: the recorded streams; parquet: the analytics store's tables",
    )
    export.add_argument(
        "--store", type=Path, metavar="DB", help="parquet: read this analytics store file"
    )
    export.set_defaults(run=guarded(export_command))
