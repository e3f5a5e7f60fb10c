"""What the simulator asks of a policy, and the live router's policy behind it.

A router folds the routing log's events (``RequestAccepted``, ``AttemptFinished``)
in log order and answers with the attempts to start. :class:`FoldRouter` is the
live router: it calls :func:`app.routing.fold.handle`, the function the Faust
agent calls, with a :class:`~app.routing.policy.Policy` built from
``RoutingParams`` — every seed strategy (and any strategy added to
``BANDIT_STRATEGY`` later) runs here unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from app.contract import AttemptFinished, Dispatch, RequestAccepted
from app.routing.driver import Driver
from app.routing.params import RoutingParams
from app.routing.policy import Policy
from app.routing.state import RouteState

#: Exclusion reasons (besides ``breaker_*``) that are about a deployment's health, not
#: about the request (``already_tried``, domain or pin rules ...).
HEALTH_REASONS = frozenset({"concurrency_full", "retry_after"})


def for_health(reason: str) -> bool:
    return reason.startswith("breaker_") or reason in HEALTH_REASONS


@dataclass(frozen=True, slots=True)
class Choice:
    """One attempt to start: which request, which attempt, where."""

    request_id: str
    attempt: int
    deployment: str
    #: Deployments left out of this decision for their health (breaker, Retry-After ...).
    excluded: tuple[str, ...] = ()
    #: Epoch seconds: the call is not made before (retry backoff).
    not_before: float = 0.0
    #: Epoch seconds: the request's deadline; the call's budget ends there.
    deadline: float = math.inf
    #: The live router's dispatch (None from the simulator-only baselines).
    dispatch: Dispatch | None = None


class Router(Protocol):
    def fold(self, event: RequestAccepted | AttemptFinished) -> list[Choice]: ...

    def waiting(self, request_id: str) -> bool:
        """Is an attempt of this request waiting for a deployment (parked)?"""
        ...

    def answered(self) -> list[str]:
        """Requests the last fold answered (the engine ends those not ended yet)."""
        ...


class FoldRouter:
    """The live router's pure fold, with its state held between events."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.driver = Driver(lambda: policy)
        #: Routing-log offset of the last event folded.
        self.position = -1
        self._answered: list[str] = []

    @property
    def state(self) -> RouteState:
        (state,) = self.driver.states.values() or [RouteState()]
        assert isinstance(state, RouteState)  # one route, no budgets
        return state

    def waiting(self, request_id: str) -> bool:
        if any(p.request_id == request_id for p in self.state.parking.parked.values()):
            return True
        lines = self.driver.memory.values()
        return any(
            isinstance(e, RequestAccepted) and e.request.request_id == request_id
            for m in lines
            for _, e in m.line
        )

    def answered(self) -> list[str]:
        return self._answered

    def fold(self, event: RequestAccepted | AttemptFinished) -> list[Choice]:
        self.position += 1
        step = self.driver.fold(event, self.position)
        self._answered = [r.request_id for r in step.responses]
        return [
            Choice(
                d.decision.request_id,
                d.decision.attempt,
                d.decision.deployment,
                tuple(e.deployment for e in d.decision.excluded if for_health(e.reason)),
                d.not_before,
                d.deadline,
                d,
            )
            for d in step.dispatches
        ]


class ExplicitParams(RoutingParams):
    """``RoutingParams`` from explicit values and defaults only.

    The environment running the benchmark (``BANDIT_*``, ``CB_*``) cannot change
    a number; the parameters used are written into the result.
    """

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def routing_params(
    strategy: str | None = None, settings: Mapping[str, str] | None = None
) -> RoutingParams:
    """The default routing parameters, with ``BANDIT_STRATEGY`` and any other variable set
    when given.

    ``settings`` maps variable names (``CB_MODE``, ``BANDIT_EXPLORATION_BONUS`` ...) to
    values. Raises ``pydantic.ValidationError`` for a value ``RoutingParams`` does not accept.
    """
    values: dict[str, Any] = dict(settings or {})
    if strategy is not None:
        values["BANDIT_STRATEGY"] = strategy
    return ExplicitParams(**values)
