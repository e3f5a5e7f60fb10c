"""What the router service reads and writes, given to it: rows, topics, the log, the policy.

The router agent binds these to the worker's Faust tables and topics
(``agents/router.py``); tests bind them to fakes, so the pipeline's order of sends,
row writes and acks is tested without a broker or Faust.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app.contract import Dispatch, Response
from app.routing.driver import Recall, Recalled
from app.routing.fold import Want
from app.routing.keys import KeyState
from app.worker.transactions import Named, Sender, TransactionalWriter


@dataclass(frozen=True)
class Outbox:
    """Where a step's records go."""

    decisions: Named
    responses: Named
    #: The routing log (budget asks, verdicts, settlements).
    routing_log: Named
    #: The attempt's dispatch record, and its call started (or spilled); its delivery.
    hand_off: Callable[[Dispatch, Sender], Awaitable[asyncio.Future[Any]]]
    #: The gateway's copy of a response the router publishes (never waits).
    reply: Callable[[Response], None]
    #: A response the router publishes, for the judge's accounting.
    answered: Callable[[Response], Awaitable[None]]


@dataclass(frozen=True)
class Transactions:
    """Exactly-once: the routing partitions' transactions and the rows that join them."""

    #: The partition's transaction (raises ``NotCommitted`` when this worker lost it).
    writer: Callable[[int], Awaitable[TransactionalWriter]]
    #: The route-state table's changelog topic.
    changelog: Callable[[], str]
    #: A key's row as its changelog record (key, value).
    row_record: Callable[[str, KeyState], tuple[bytes, bytes]]
    #: A committed row into the local store (key, state, partition).
    keep: Callable[[str, KeyState, int], None]
    #: The changelog offset a partition's local store now holds (partition, offset).
    restored_through: Callable[[int, int], None]


@dataclass(frozen=True)
class RouterPorts:
    #: A key's row (its state; a new key's is empty).
    load_state: Callable[[str], KeyState]
    #: Write a key's row (at-least-once: the local store and its changelog).
    save_state: Callable[[str, KeyState], None]
    outbox: Outbox
    #: Read back from the routing log what the fold's memory lacks.
    recall: Callable[[Want, str, int, int, Recall], Awaitable[Recalled]]
    #: Read the policy topic (a route names a version not read yet).
    refresh_policy: Callable[[], Awaitable[None]]
    #: The reply addresses a folded event and its dispatches carry.
    remember_replies: Callable[[object, list[Dispatch]], None]
    #: A route's gauges after a step (breakers, waiting requests, budgets).
    export_gauges: Callable[[str, Any], None]
    #: Events of a route folded before its row is written, at most.
    batch_max: int
    #: Rows of a partition written at most this often while events keep coming (seconds).
    flush_interval_s: float
    #: Exactly-once (None: at-least-once).
    transactions: Transactions | None = None
    #: The clock of the batching (monotonic seconds).
    monotonic: Callable[[], float] = time.monotonic
