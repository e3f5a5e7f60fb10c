"""Policy as events: the relay, the follower and SIGHUP.

* The relay (an agent on the one-partition policy topic, so one worker runs it)
  copies each new version onto the routing log: one ``policy.changed`` per route
  of the new or the previous version, keyed by route, so each route switches at
  one position of its own log, on every worker, and replay sees the same. It
  waits for the broker's acknowledgements before the proposal counts as relayed;
  a crash re-relays, and a route folds a version once.
* Every worker follows the topic (:class:`app.policy.log.PolicyFollower`), so its
  book knows every version a route's state may name; the router folds
  ``policy.changed`` itself and adds the document to the same book.
* SIGHUP re-reads the providers file: valid, it is proposed; invalid,
  one line naming the field is logged and the policy in force stays.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from faust import StreamT

from agents.app import app, policy_topic, routing_log, settings
from app.config.schema import ConfigError
from app.contract import PolicyChanged, derived_id
from app.policy.document import document_from_file
from app.policy.holder import policy_holder
from app.policy.log import PolicyFollower, Version, proposal, propose

log = logging.getLogger(__name__)
#: How often a worker looks for versions it has not folded itself (seconds): what ingest
#: applies (route aliases, presets, input rules) follows a new version within this, as the
#: gateway's does (a route it does not know is looked up at once, app/policy/log.py).
FOLLOW_INTERVAL_S = 1.0


def follower() -> PolicyFollower:
    """This worker's follower, sharing the holder's book (the router folds with it)."""
    return policy_holder().follower()


def adopt(started: PolicyFollower) -> None:
    """Go on from where the worker's start read the topic (in another event loop)."""
    policy_holder().adopt(started)


@app.agent(policy_topic)
async def relay(stream: StreamT[bytes]) -> None:
    async for event in stream.events():
        offset = event.message.offset
        await follower().through(offset)
        version = follower().version_at(offset)
        if version is not None:
            await _relay(version)


async def _relay(version: Version) -> None:
    routes = follower().relay_keys(version)
    sends = []
    for route in routes:
        change = PolicyChanged(
            id=derived_id("policy.changed", version.number, route),
            occurred_at=version.proposal.occurred_at,
            route=route,
            version=version.number,
            hash=version.proposal.hash,
            document=version.proposal.document,
            source=version.proposal.source,
        )
        sends.append(await routing_log.send(key=route.encode(), value=change.model_dump_json()))
    await asyncio.gather(*sends)
    log.info("policy version %d relayed to %d route(s)", version.number, len(routes))


@app.timer(interval=FOLLOW_INTERVAL_S)  # type: ignore[untyped-decorator]
async def follow() -> None:
    await follower().refresh()


@app.task  # type: ignore[untyped-decorator]
async def reload_on_sighup() -> None:
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, _reload)


_reloads: set[asyncio.Future[bool]] = set()


def _reload(*_: Any) -> None:
    reload = asyncio.ensure_future(reload_file("sighup"))
    _reloads.add(reload)
    reload.add_done_callback(_reloads.discard)


async def reload_file(source: Any = "sighup") -> bool:
    """Propose the providers file; False (and one logged line) when it is invalid."""
    try:
        document = document_from_file(settings.providers, settings.routing)
    except ConfigError as exc:
        log.error("providers file not reloaded, the policy in force stays: %s", exc)
        return False
    await propose(settings, proposal(document, source))
    log.info("providers file proposed as a new policy (%s)", source)
    return True
