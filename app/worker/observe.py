"""What a worker measures for the dashboard beyond its agents' counters.

* ``RecordSensor``, a Faust sensor: the age of every record a worker reads, by stream
  (``switchyard_record_age_seconds``: the broker hops a request makes before its provider
  call), and every record it sends to the dead-letter topic. It reads only timestamps and
  topic names, never a record's content.
* ``WorkerCollector``, read when ``/metrics`` is: consumer lag per assigned partition, and
  the breaker state and finished attempts per route and deployment from the route-state
  rows this worker holds.

And the worker's probes: ``readiness`` (``/readyz``) tells whether partitions are assigned
and the tables recovered.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import faust
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from app import metrics
from app.routing.keys import KeyState
from app.routing.state import BREAKER_GAUGE, RouteState
from app.settings import Topics

#: Faust's changelog topics end so; their partitions are recovery, not work, and not lag.
CHANGELOG_SUFFIX = "-changelog"


class RecordSensor(faust.Sensor):
    """Record ages and dead letters, from Faust's hooks (no record is parsed)."""

    def __init__(self, topics: Topics, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: topic name -> stream name (``requests``, ``routing`` ...): bounded label values.
        self.streams: dict[str, str] = {topic: name for name, topic in topics.model_dump().items()}
        self.deadletter = topics.deadletter

    def on_message_in(self, tp: Any, offset: int, message: Any) -> None:
        stream = self.streams.get(tp.topic)
        written = getattr(message, "timestamp", None)
        if stream is None or not written:
            return
        age = max(0.0, time.time() - float(written))
        metrics.RECORD_AGE.labels(stream=stream).observe(age)

    def on_send_initiated(
        self, producer: Any, topic: str, message: Any, keysize: int, valsize: int
    ) -> Any:
        if topic == self.deadletter:
            metrics.DEADLETTERS.inc()
        return None


def consumer_lags(consumer: Any) -> list[tuple[str, int, int]]:
    """``(topic, partition, lag)`` of each assigned partition whose position is known."""
    try:
        assignment = sorted(consumer.assignment())
    except Exception:  # not started yet, or stopping: nothing assigned to report
        return []
    read: Mapping[Any, int | None] = getattr(consumer, "_read_offset", {})
    rows = []
    for tp in assignment:
        if tp.topic.endswith(CHANGELOG_SUFFIX):
            continue
        try:
            high = consumer.highwater(tp)
        except Exception:
            continue
        last = read.get(tp)
        if high is None or (last is None and high > 0):
            continue  # nothing fetched yet: unknown, not zero
        position = last + 1 if last is not None else 0
        rows.append((tp.topic, tp.partition, max(0, int(high) - position)))
    return rows


def deployment_rows(states: Mapping[str, KeyState]) -> Iterator[tuple[str, str, float, int]]:
    for route, state in sorted(states.items()):
        if not isinstance(state, RouteState):
            continue  # a budget's key: no deployments
        for deployment, arm in sorted(state.arms.items()):
            yield route, deployment, float(BREAKER_GAUGE[arm.breaker.state]), arm.pulls


class WorkerCollector(Collector):
    """The scrape-time series (``app.metrics.CONSUMER_LAG``, ``DEPLOYMENT_*``)."""

    def __init__(self, app: faust.App, states: Callable[[], Mapping[str, KeyState]]) -> None:
        self.app = app
        self.states = states

    def describe(self) -> list[Metric]:
        return []  # registering must not collect: the app is not started then

    def collect(self) -> Iterator[Metric]:
        yield metrics.consumer_lag_family(consumer_lags(self.app.consumer))
        try:
            rows = list(deployment_rows(self.states()))
        except Exception:  # tables not open yet (starting, rebalancing): no rows this time
            rows = []
        yield from metrics.deployment_families(rows)


def readiness(app: faust.App) -> tuple[bool, str]:
    """Ready: started, not stopping, partitions assigned and table recovery completed."""
    if app.should_stop:
        return False, "stopping"
    recovery: Any = getattr(app.tables, "recovery", None)
    if recovery is None or not recovery.completed.is_set():
        return False, "starting"
    if app.rebalancing:
        return False, "rebalancing"
    if getattr(app, "in_recovery", False):
        return False, "recovering"
    return True, "ready"
