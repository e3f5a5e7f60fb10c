"""The policies a benchmark compares, by name.

A name is a simulator-only baseline (``round_robin``, ``static_priority``,
``oracle``) or a ``BANDIT_STRATEGY`` value, run by the live router's fold,
optionally followed by settings: ``composite+CB_MODE=ewma`` is the composite
strategy with the EWMA breaker, ``adaptive+ADAPTIVE_QUALITY_PRIORS=false``
the recommended strategy without the config's quality priors. A name
``RoutingParams`` does not accept is skipped, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.routing.params import RoutingParams
from app.routing.policy import Policy
from bench.sim.baselines import Oracle, RoundRobin, StaticPriority
from bench.sim.routers import FoldRouter, Router, routing_params
from bench.sim.world import Scenario, World

ORACLE = "oracle"
BASELINES: dict[str, Callable[[World, Policy], Router]] = {
    "round_robin": RoundRobin,
    "static_priority": StaticPriority,
    ORACLE: Oracle,
}
DEFAULT_POLICIES = (
    "round_robin",
    "static_priority",
    "ucb1",
    "thompson",
    "composite",
    "composite+CB_MODE=ewma",
    "adaptive",
    "adaptive+ADAPTIVE_QUALITY_PRIORS=false",
    ORACLE,
)


@dataclass(frozen=True)
class Resolved:
    #: Policies to run, in the order asked, the oracle always among them (regret needs it).
    names: tuple[str, ...]
    #: (name, reason) of each policy left out.
    skipped: tuple[tuple[str, str], ...]


def split(name: str) -> tuple[str, dict[str, str]]:
    """``"composite+CB_MODE=ewma"`` -> ``("composite", {"CB_MODE": "ewma"})``."""
    base, *assignments = name.split("+")
    settings: dict[str, str] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key:
            raise ValueError(f"policy {name!r}: {assignment!r} is not VARIABLE=value")
        settings[key] = value
    return base, settings


def params_of(name: str) -> RoutingParams:
    """The routing parameters a policy runs with (a baseline: its breaker and retries).

    Raises ``ValidationError`` when ``RoutingParams`` does not accept them.
    """
    base, settings = split(name)
    return routing_params(None if base in BASELINES else base, settings)


def resolve(names: Iterable[str]) -> Resolved:
    run: list[str] = []
    skipped: list[tuple[str, str]] = []
    for name in names:
        if name in run:
            continue
        try:
            params_of(name)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            skipped.append(
                (name, f"RoutingParams does not accept it yet ({where}: {first['msg']})")
            )
            continue
        run.append(name)
    if ORACLE not in run:
        run.append(ORACLE)
    return Resolved(tuple(run), tuple(skipped))


def is_live(name: str) -> bool:
    """True for a strategy of the live router (run through ``handle``)."""
    return split(name)[0] not in BASELINES


def build_router(name: str, world: World, scenario: Scenario) -> Router:
    base = split(name)[0]
    policy = Policy(scenario.config, params_of(name))
    if base in BASELINES:
        return BASELINES[base](world, policy)
    return FoldRouter(policy)


def describe(name: str) -> dict[str, Any]:
    return {"live_router": is_live(name), "params": params_of(name).model_dump(mode="json")}
