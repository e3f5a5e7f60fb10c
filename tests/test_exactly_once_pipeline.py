"""The router's pipeline in exactly-once mode, without a broker: a transaction holds the
records and the rows; the local store gets the rows a commit wrote even when a
rebalance came during the commit; a transaction a rebalance ended acks nothing.

The fakes are tests/router_fakes.py's; the writer is a fake transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from factories import T0, accepted
from router_fakes import Wired, wired

from app.router.pipeline import SendFailed
from app.router.ports import Transactions
from app.routing.state import RouteState
from app.worker.transactions import NotCommitted

__all__ = ["wired"]  # the fixture (tests/router_fakes.py)


class FakeTransaction:
    """Records held until ``commit``, which waits for ``release`` (a commit under way)."""

    def __init__(self) -> None:
        self.held: list[tuple[str, asyncio.Future[Any]]] = []
        self.committed: list[str] = []
        self.release = asyncio.Event()
        self.fail = False

    def sender(self) -> Any:
        async def send(to: Any, key: bytes | None, value: Any, headers: Any = None) -> Any:
            return self.send(getattr(to, "name", "?"), key, value)

        return send

    def send(self, topic: str, key: Any, value: Any, partition: int | None = None) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.held.append((topic, future))
        return future

    async def commit(self) -> None:
        await self.release.wait()
        batch, self.held = self.held, []
        for n, (topic, future) in enumerate(batch):
            if self.fail:
                future.set_exception(NotCommitted("fenced"))
                future.exception()
            else:
                future.set_result(type("Meta", (), {"offset": n})())
                self.committed.append(topic)
        if self.fail:
            raise NotCommitted("fenced")


@pytest.fixture
def transaction(wired: Wired) -> tuple[FakeTransaction, dict[str, RouteState], Wired]:
    table = wired.table
    writer = FakeTransaction()

    async def get(partition: int) -> Any:
        return writer

    wired.transactions = Transactions(
        writer=get,
        changelog=lambda: "changelog",
        row_record=lambda route, state: (route.encode(), b"row"),
        keep=lambda route, state, partition: table.__setitem__(route, state),
        restored_through=lambda partition, offset: None,
    )
    return writer, table, wired


async def test_records_and_rows_are_one_transaction(
    transaction: tuple[FakeTransaction, dict[str, RouteState], Wired],
) -> None:
    writer, table, wired = transaction
    writer.release.set()
    worker = wired.router()
    assert await worker.fold(accepted("r1", T0, offset=0), "ev0", 0) == ["ev0"]
    assert sorted(set(writer.committed)) == ["changelog", "decisions_topic", "dispatch_log"]
    assert table["chat"].position == 0


async def test_a_commit_across_a_rebalance_still_writes_its_rows_and_acks_nothing(
    transaction: tuple[FakeTransaction, dict[str, RouteState], Wired],
) -> None:
    writer, table, wired = transaction
    worker = wired.router()
    folding = asyncio.ensure_future(worker.fold(accepted("r1", T0, offset=0), "ev0", 0))
    await asyncio.sleep(0)
    worker.forget()  # a rebalance while the commit is under way
    writer.release.set()
    assert await folding == []  # redelivered after the rebalance
    # Committed: the local store has the row (Faust does not restore a partition that
    # stays), so the redelivered event finds its position there and sends nothing again.
    assert table["chat"].position == 0
    sent = len(writer.committed)
    assert await worker.fold(accepted("r1", T0, offset=0), "ev0", 0) == ["ev0"]
    assert writer.committed[sent:] == ["changelog"]  # the row again, no record


async def test_a_transaction_a_rebalance_ended_acks_nothing_and_a_failure_stops(
    transaction: tuple[FakeTransaction, dict[str, RouteState], Wired],
) -> None:
    writer, table, wired = transaction
    writer.fail = True
    worker = wired.router()
    folding = asyncio.ensure_future(worker.fold(accepted("r1", T0, offset=0), "ev0", 0))
    await asyncio.sleep(0)
    worker.forget()
    writer.release.set()
    assert await folding == []
    assert "chat" not in table
    with pytest.raises(SendFailed):  # no rebalance: the worker must not go on
        await wired.router().fold(accepted("r2", T0, offset=1), "ev1", 1)
