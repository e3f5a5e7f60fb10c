"""The router's state: one row per route, co-partitioned with the routing log.

A row is a :class:`app.routing.state.RouteState` as JSON (:mod:`app.routing.rows`).
The router writes it once the sends of every event it includes are acknowledged
(agents/router.py), so one changelog record carries the whole effect of one or
more consecutive routing-log events, never part of one, and never an event whose
records could still be lost.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.serializers.codecs import dumps
from faust.types import TP

from app.routing.rows import from_row, to_row
from app.routing.state import RouteState
from app.settings import get_settings
from app.worker.faust_app import table_store_options, worker_app

app = worker_app()
settings = get_settings()

route_state = app.Table(
    "route-state",
    default=None,
    partitions=settings.partitions,
    schema=faust.Schema(key_serializer="json", value_serializer="json"),
    options=table_store_options(settings),
)


def load_route_state(route: str) -> RouteState:
    row = route_state.get(route)
    return RouteState() if row is None else from_row(row)


def save_route_state(route: str, state: RouteState) -> None:
    route_state[route] = to_row(state)


def changelog_name() -> str:
    return route_state.changelog_topic.get_topic_name()


def row_record(route: str, state: RouteState) -> tuple[bytes, bytes]:
    """The changelog record of a row, as Faust writes it (and its restore reads it)."""
    return dumps("json", route), dumps("json", to_row(state))


def keep_route_state(route: str, state: RouteState, partition: int) -> None:
    """Write a row to the local store of ``partition`` only: its changelog record is
    already committed (exactly-once, app/worker/transactions.py). Faust's store picks the
    partition from the event being processed; a transaction of one partition may be
    committed while an event of another is, so the partition is named here."""
    store: Any = route_state.data  # faust's rocksdb store: one database per partition
    key = store._encode_key(route)
    store._db_for_partition(partition).put(key, store._encode_value(to_row(state)))
    store._key_index[key] = partition


def restored_through(partition: int, offset: int) -> None:
    """The local store holds the changelog up to ``offset``: a restore starts after it."""
    store: Any = route_state.data  # faust's rocksdb store
    store.set_persisted_offset(TP(changelog_name(), partition), offset)


def all_route_states() -> dict[str, RouteState]:
    """The rows this worker holds (the routes of its assigned partitions)."""
    states = {}
    for key, row in route_state.items():
        if row is not None:
            states[str(key)] = from_row(row)
    return states
