"""An executor that reaches a dispatch long past its deadline reports nothing (issue 4).

The router answers and closes an attempt still open at deadline + grace; an
outcome folded after that is not a pull, so ``pulls == distinct outcomes``
would break. Found in ``bench crash`` under overload: 185 attempts expired,
their outcomes came 20-70 s later, pulls 4,688 vs outcomes 4,873.
"""

from __future__ import annotations

from typing import Any

import pytest
from factories import T0, accepted, policy

import agents.executor as executor
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


async def test_a_dispatch_past_saving_publishes_no_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    published: list[Any] = []

    async def publish(*args: Any) -> None:
        published.append(args)

    monkeypatch.setattr(executor, "_publish", publish)
    await executor.run_dispatch(dispatch_at(T0))  # deadline: 2023
    assert published == []
