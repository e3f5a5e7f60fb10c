"""``switchyard policy apply|history`` (policy versions), wired up in :mod:`app.cli`.

``apply FILE`` validates a providers file and proposes it: the relay makes it
the next version on every route (no restart). ``apply --version N`` proposes
version N's document again: a rollback is a new version with an old policy.
``apply`` then waits until the version is in force on every route (each route has
folded its ``policy.changed``, :mod:`app.policy.wait`), at most ``--wait-timeout``
seconds; ``--no-wait`` returns once the proposal is acknowledged. ``history`` lists
the versions in force order. Exit codes: 0 done, 1 not in force within the timeout
(what is behind is listed), 2 an invalid file, an unknown version or an unreachable
broker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from app.config.schema import ConfigError
from app.contract import PolicyProposed
from app.policy.document import describe, document_from_file
from app.policy.log import PolicyFollower, proposal, propose
from app.policy.wait import routing_log_ends, wait_in_force
from app.settings import Settings, get_settings

#: How long ``apply`` waits for the version to be in force by default (seconds).
WAIT_TIMEOUT_S = 60.0


def register(commands: Any) -> None:
    policy = commands.add_parser("policy", help="apply a providers file live, list versions")
    actions = policy.add_subparsers(dest="policy_action", required=True)
    apply = actions.add_parser("apply", help="make a providers file the next policy version")
    target = apply.add_mutually_exclusive_group(required=True)
    target.add_argument("file", nargs="?", type=Path, help="the providers file")
    target.add_argument("--version", type=int, help="roll back: apply version N again")
    apply.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="return once every route runs the new version (default); --no-wait: once "
        "the proposal is acknowledged",
    )
    apply.add_argument(
        "--wait-timeout",
        type=float,
        default=WAIT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up waiting after this long, exit code 1 (default {WAIT_TIMEOUT_S:g})",
    )
    apply.set_defaults(run=_apply)
    history = actions.add_parser("history", help="the policy versions, oldest first")
    history.add_argument("--json", action="store_true", help="JSON Lines, one version a line")
    history.set_defaults(run=_history)


def _apply(args: argparse.Namespace) -> int:
    settings = get_settings()
    try:
        if args.version is not None:
            versions = asyncio.run(_read(settings)).versions
            if not 1 <= args.version <= len(versions):
                raise ConfigError(f"no policy version {args.version} (latest: {len(versions)})")
            old = versions[args.version - 1].proposal
            proposed = proposal(old.document, "rollback", rollback_of=args.version)
        else:
            proposed = proposal(document_from_file(args.file, settings.routing), "apply")
    except ConfigError as exc:
        print(f"switchyard policy apply: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_propose(settings, proposed, args.wait, args.wait_timeout))


async def _propose(
    settings: Settings, proposed: PolicyProposed, wait: bool, timeout_s: float
) -> int:
    """Propose; with ``wait``, follow the version until it is in force on every route."""
    try:
        starts = await routing_log_ends(settings) if wait else None
    except LookupError:  # no routing log: the workers will start with this version
        print("no worker has started yet: not waiting", file=sys.stderr)
        starts = None
    offset = await propose(settings, proposed)
    print(f"proposed policy {proposed.hash} ({proposed.source}); `switchyard policy history`")
    if starts is None:
        return 0
    began = time.monotonic()
    follower = PolicyFollower(settings)
    await follower.through(offset)
    version = follower.version_at(offset)
    if version is None:
        number = follower.versions[-1].number if follower.versions else 0
        print(f"no new version: it is the policy in force (v{number})")
        return 0
    keys = follower.relay_keys(version)
    left = max(0.0, timeout_s - (time.monotonic() - began))
    progress = await wait_in_force(settings, version.number, keys, starts, left)
    took = time.monotonic() - began
    if not progress.done:
        print(
            f"switchyard policy apply: v{version.number} not in force after {took:.0f} s:",
            file=sys.stderr,
        )
        for line in progress.behind():
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"v{version.number} in force on {', '.join(keys)} after {took:.1f} s")
    return 0


def _history(args: argparse.Namespace) -> int:
    follower = asyncio.run(_read(get_settings()))
    for version in follower.versions:
        row = {
            "version": version.number,
            "offset": version.offset,
            "at": version.proposal.occurred_at.isoformat(),
            "source": version.proposal.source,
            "rollback_of": version.proposal.rollback_of,
            **describe(version.proposal.document),
        }
        if args.json:
            print(json.dumps(row))
        else:
            print(
                f"v{row['version']}  {row['at']}  {row['source']:<8}  {row['hash']}  "
                f"routes={','.join(row['routes'])}  providers={','.join(row['providers'])}"
            )
    if not follower.versions:
        print("no policy version yet (a worker's start proposes its providers file)")
    return 0


async def _read(settings: Any) -> PolicyFollower:
    follower = PolicyFollower(settings)
    await follower.refresh()
    return follower
