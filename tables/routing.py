"""The router's state: one row per key of the routing log, co-partitioned with it.

A route's row is a :class:`app.routing.state.RouteState` as JSON, a budget's
(``budget:SCOPE``) a :class:`app.routing.budget_state.BudgetState`
(:mod:`app.routing.rows`; the key tells which).
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

from app.routing.keys import KeyState, new_state
from app.routing.rows import row_of, state_of
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


def load_route_state(key: str) -> KeyState:
    """A key's state: its row's, else a new key's."""
    row = route_state.get(key)
    return new_state(key) if row is None else state_of(key, row)


def save_route_state(key: str, state: KeyState) -> None:
    route_state[key] = row_of(state)


def changelog_name() -> str:
    return route_state.changelog_topic.get_topic_name()


def row_record(key: str, state: KeyState) -> tuple[bytes, bytes]:
    """The changelog record of a row, as Faust writes it (and its restore reads it)."""
    return dumps("json", key), dumps("json", row_of(state))


def keep_route_state(key: str, state: KeyState, partition: int) -> None:
    """Write a row to the local store of ``partition`` only: its changelog record is
    already committed (exactly-once, app/worker/transactions.py). Faust's store picks the
    partition from the event being processed; a transaction of one partition may be
    committed while an event of another is, so the partition is named here."""
    store: Any = route_state.data  # faust's rocksdb store: one database per partition
    encoded = store._encode_key(key)
    store._db_for_partition(partition).put(encoded, store._encode_value(row_of(state)))
    store._key_index[encoded] = partition


def restored_through(partition: int, offset: int) -> None:
    """The local store holds the changelog up to ``offset``: a restore starts after it."""
    store: Any = route_state.data  # faust's rocksdb store
    store.set_persisted_offset(TP(changelog_name(), partition), offset)


def all_route_states() -> dict[str, KeyState]:
    """The rows this worker holds (the keys of its assigned partitions)."""
    states = {}
    for key, row in route_state.items():
        if row is not None:
            states[str(key)] = state_of(str(key), row)
    return states
