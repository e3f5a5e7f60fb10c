"""Fakes for the router service (app/router/): a producer buffer that a kill drops, the
log only acknowledged records reach, a table of rows, and the ports that bind them.

The fold is the real one; no broker, no Faust.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from factories import policy

from app.contract import Dispatch
from app.router.pipeline import Pipeline
from app.router.ports import Outbox, RouterPorts, Transactions
from app.routing.book import PolicyBook
from app.routing.driver import Driver, Recalled
from app.routing.fold import Want
from app.routing.keys import KeyState, new_state
from app.settings import Settings
from app.worker.transactions import Sender


class FakeBroker:
    """A producer buffer that a kill drops, and the log that only acknowledged records reach."""

    def __init__(self) -> None:
        self.acknowledge = False
        self.log: list[tuple[str, dict[str, Any]]] = []
        self.buffer: list[tuple[str, bytes, asyncio.Future[None]]] = []
        #: The calls the router started in its own process: recorded, not made.
        self.launched: list[Dispatch] = []

    def topic(self, name: str) -> FakeTopic:
        return FakeTopic(self, name)

    def kill(self) -> None:
        for _, _, future in self.buffer:
            future.cancel()
        self.buffer.clear()

    def records(self, topic: str) -> list[dict[str, Any]]:
        return [value for name, value in self.log if name == topic]


class FakeTopic:
    def __init__(self, broker: FakeBroker, name: str) -> None:
        self.broker = broker
        self.name = name

    def get_topic_name(self) -> str:
        return self.name

    async def send(self, *, key: bytes, value: str, headers: Any = None) -> Awaitable[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.broker.acknowledge:
            self.broker.log.append((self.name, json.loads(value)))
            future.set_result(None)
        else:
            self.broker.buffer.append((self.name, value.encode(), future))
        return future


@dataclass
class Wired:
    """The router's ports bound to the fakes; :meth:`router` is a new process's pipeline."""

    broker: FakeBroker = field(default_factory=FakeBroker)
    table: dict[str, KeyState] = field(default_factory=dict)
    #: Rows written at every chance (the flush interval is tested on its own).
    flush_interval_s: float = 0.0
    save: Callable[[str, KeyState], None] | None = None
    clock: Callable[[], float] = time.monotonic
    transactions: Transactions | None = None

    def router(self) -> Pipeline:
        current = policy()
        book = PolicyBook()  # the file's policy, no version from the policy topic yet
        return Pipeline(self.ports(), Driver(lambda: current, book=book))

    def ports(self) -> RouterPorts:
        dispatch_log = self.broker.topic("dispatch_log")

        async def hand_off(dispatch: Dispatch, send: Sender) -> asyncio.Future[Any]:
            """As the worker's: the record, and the call started here (at-least-once)."""
            sent = await send(dispatch_log, dispatch.decision.route.encode(),
                              dispatch.model_dump_json(), None)  # fmt: skip
            if self.transactions is None:
                self.broker.launched.append(dispatch)
            return sent

        async def nothing(*_: Any) -> None:
            return None

        async def recall(want: Want, *_: Any) -> Recalled:
            raise AssertionError(f"the fakes hold no log to read back ({want.kind})")

        return RouterPorts(
            load_state=lambda key: self.table.get(key) or new_state(key),
            save_state=self.save or self.table.__setitem__,
            outbox=Outbox(
                decisions=self.broker.topic("decisions_topic"),
                responses=self.broker.topic("responses_topic"),
                routing_log=self.broker.topic("routing_log"),
                hand_off=hand_off,
                reply=lambda response: None,
                answered=nothing,
            ),
            recall=recall,
            refresh_policy=nothing,
            remember_replies=lambda event, dispatches: None,
            export_gauges=lambda route, step: None,
            batch_max=Settings().router_batch_max,
            flush_interval_s=self.flush_interval_s,
            transactions=self.transactions,
            monotonic=self.clock,
        )


@pytest.fixture
def wired() -> Wired:
    return Wired()
