"""``switchyard policy apply|history`` (policy versions), wired up in :mod:`app.cli`.

``apply FILE`` validates a providers file and proposes it: the relay makes it
the next version on every route (no restart). ``apply --version N`` proposes
version N's document again: a rollback is a new version with an old policy.
``history`` lists the versions in force order. Exit codes: 0 done, 2 an invalid
file, an unknown version or an unreachable broker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from app.config.schema import ConfigError
from app.policy.document import describe, document_from_file
from app.policy.log import PolicyFollower, proposal, propose
from app.settings import get_settings


def register(commands: Any) -> None:
    policy = commands.add_parser("policy", help="apply a providers file live, list versions")
    actions = policy.add_subparsers(dest="policy_action", required=True)
    apply = actions.add_parser("apply", help="make a providers file the next policy version")
    target = apply.add_mutually_exclusive_group(required=True)
    target.add_argument("file", nargs="?", type=Path, help="the providers file")
    target.add_argument("--version", type=int, help="roll back: apply version N again")
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
    asyncio.run(propose(settings, proposed))
    print(f"proposed policy {proposed.hash} ({proposed.source}); `switchyard policy history`")
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
