"""``switchyard credentials new-key`` and ``switchyard credentials seal``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app.credentials._seal import CredentialError, new_master_key, seal


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    credentials = commands.add_parser(
        "credentials", help="the keys tenants bring: a master key, a sealed secret"
    )
    actions = credentials.add_subparsers(dest="credentials_action", required=True)
    new_key = actions.add_parser("new-key", help="print a new master key")
    new_key.set_defaults(run=_new_key)
    sealing = actions.add_parser(
        "seal",
        help="seal a secret read from standard input with SWITCHYARD_CREDENTIALS_KEY; print "
        "the token for a credential's 'sealed' field",
    )
    sealing.set_defaults(run=_seal)


def _new_key(_: Any) -> int:
    print(new_master_key())
    return 0


def _seal(_: Any) -> int:
    from app.settings import Settings

    master = Settings().credentials_key
    secret = sys.stdin.read().strip()
    if master is None or not secret:
        print(
            "switchyard credentials seal: set SWITCHYARD_CREDENTIALS_KEY and give the secret "
            "on standard input",
            file=sys.stderr,
        )
        return 2
    try:
        print(seal(secret, master.get_secret_value()))
    except CredentialError as exc:
        print(f"switchyard credentials seal: {exc}", file=sys.stderr)
        return 2
    return 0
