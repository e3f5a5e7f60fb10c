"""An executor that reaches a dispatch long past its deadline makes no call and reports
it ``expired`` at once (issues 4 and 17).

The router would answer and close such an attempt at deadline + grace anyway
(``lost``); reporting it closes it at once, and ``expired`` counts for nothing
against the provider, nor as a pull (found in ``bench backlog``: after a worker
outage, 463 attempts of the backlog waited out the grace as ``lost``).
"""

from __future__ import annotations

from typing import Any

import pytest
from factories import T0, accepted, policy

import agents.executor as executor
from app.contract import StatusClass
from app.routing.fold import LOST_ATTEMPT_GRACE_S, handle
from app.routing.state import RouteState


def dispatch_at(t: float) -> Any:
    pol = policy()
    (dispatch,) = handle(RouteState(), accepted("late", t), 0, pol).dispatches
    return dispatch


def test_too_late_is_half_the_grace_past_the_deadline() -> None:
    dispatch = dispatch_at(T0)
    assert not executor.too_late(dispatch, dispatch.deadline)
    assert not executor.too_late(dispatch, dispatch.deadline + LOST_ATTEMPT_GRACE_S / 2)
    assert executor.too_late(dispatch, dispatch.deadline + LOST_ATTEMPT_GRACE_S / 2 + 0.001)


async def test_a_dispatch_past_saving_is_reported_expired_without_a_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    published: list[Any] = []

    async def publish(sealed: Any, partition: int | None = None) -> None:
        published.append(sealed)

    async def no_call(*args: Any) -> Any:
        raise AssertionError("no provider call past the deadline")

    monkeypatch.setattr(executor, "_publish", publish)
    monkeypatch.setattr(executor, "_call_in_time", no_call)
    known = policy()
    providers = known.config.provider_by_id
    holder = type(
        "H",
        (),
        {
            "provider": staticmethod(lambda pid, _version: providers.get(pid)),
            "version": staticmethod(lambda _version: known),
            "current": known,
        },
    )
    monkeypatch.setattr(executor, "policy_holder", lambda: holder)
    await executor.run_dispatch(dispatch_at(T0))  # deadline: 2023
    (sealed,) = published
    assert sealed.outcome.status_class is StatusClass.EXPIRED and sealed.response is None
