"""The router's state: one row per route, co-partitioned with the routing log.

A row is a :class:`app.routing.state.RouteState` as JSON. It is written once per
routing-log event, so an event's whole effect lands in one changelog record.
"""

from __future__ import annotations

import faust

from app.faust_app import app, settings, table_store_options
from app.routing.state import RouteState

route_state = app.Table(
    "route-state",
    default=None,
    partitions=settings.partitions,
    schema=faust.Schema(key_serializer="json", value_serializer="json"),
    options=table_store_options(),
)


def load_route_state(route: str) -> RouteState:
    row = route_state.get(route)
    return RouteState() if row is None else RouteState.model_validate(row)


def save_route_state(route: str, state: RouteState) -> None:
    route_state[route] = state.model_dump(mode="json")


def all_route_states() -> dict[str, RouteState]:
    """The rows this worker holds (the routes of its assigned partitions)."""
    states = {}
    for key, row in route_state.items():
        if row is not None:
            states[str(key)] = RouteState.model_validate(row)
    return states
