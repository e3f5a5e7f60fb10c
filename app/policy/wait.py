"""``switchyard policy apply`` waits until the version is in force on every route.

A route runs a version from the position of its ``policy.changed`` in its routing log:
the relay (one worker) writes one per route and budget ledger of the version and of the
one before it, after it reads the proposal, and the route's writer folds every later
record of the route with the new version. ``apply`` follows both steps from the broker
alone (no worker address needed):

1. **relayed**: the version's ``policy.changed`` of every such key is on the routing log
   (read from the log's ends as they were before the proposal);
2. **folded**: the workers' consumer group (``SWITCHYARD_APP_ID``) has committed the
   record's routing-log partition past it; a worker acks a record once the route's row
   that includes it is written, so the route's state names the version.

Ingest and the gateway need no waiting for: each reads the policy topic again before it
refuses a request naming a route or preset it does not know (``PolicyFollower.catch_up``),
so a request sent once the proposal is acknowledged is checked against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from app.compat.tansu import fetch_max_wait_ms
from app.contract import PolicyChanged
from app.kafka import bootstrap_servers, client_security, standalone_consumer
from app.settings import Settings

#: How often the committed offsets are asked for while a route has not folded (seconds).
POLL_S = 0.25
#: The type a ``policy.changed`` record's JSON names (a cheap look before parsing).
_CHANGED = b'"policy.changed"'


@dataclass
class Progress:
    """How far a version has gone: per routing-log key, where its ``policy.changed`` is,
    and whether that key's route has folded it."""

    version: int
    keys: list[str]
    #: Key -> (partition, offset) of the version's ``policy.changed``.
    relayed: dict[str, tuple[int, int]] = field(default_factory=dict)
    folded: set[str] = field(default_factory=set)

    @property
    def done(self) -> bool:
        return len(self.folded) == len(self.keys)

    def behind(self) -> list[str]:
        """What is not in force yet, one phrase per key."""
        lines = []
        for key in self.keys:
            if key not in self.relayed:
                lines.append(f"{key}: policy.changed not on the routing log yet (the relay)")
            elif key not in self.folded:
                partition, offset = self.relayed[key]
                lines.append(
                    f"{key}: not folded yet (routing log partition {partition}, offset {offset})"
                )
        return lines


async def routing_log_ends(settings: Settings) -> dict[int, int]:
    """Each routing-log partition's end offset now: the version's records come after.

    (Tansu may report an end lower than the true one; reading from there costs a few
    records more, never one missed.)"""
    consumer = _consumer(settings)
    await consumer.start()
    try:
        partitions = await _partitions(consumer, settings)
        ends = await consumer.end_offsets(partitions)
        return {tp.partition: int(end) for tp, end in ends.items()}
    finally:
        await consumer.stop()


async def wait_in_force(
    settings: Settings,
    version: int,
    keys: list[str],
    starts: dict[int, int],
    timeout_s: float,
) -> Progress:
    """Follow ``version`` until every key has folded its ``policy.changed`` or
    ``timeout_s`` passed; where it got (:attr:`Progress.done`)."""
    progress = Progress(version, sorted(keys))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_follow(settings, progress, starts), timeout_s)
    return progress


async def _follow(settings: Settings, progress: Progress, starts: dict[int, int]) -> None:
    await _read_relayed(settings, progress, starts)
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers(settings.broker), **client_security(settings)
    )
    await admin.start()
    try:
        while not progress.done:
            await _check_folded(admin, settings, progress)
            if not progress.done:
                await asyncio.sleep(POLL_S)
    finally:
        await admin.close()


async def _read_relayed(settings: Settings, progress: Progress, starts: dict[int, int]) -> None:
    """Read the routing log from ``starts`` until every key's ``policy.changed`` of the
    version is found."""
    wanted = set(progress.keys)
    consumer = _consumer(settings)
    await consumer.start()
    try:
        partitions = await _partitions(consumer, settings)
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, starts.get(tp.partition, 0))
        while not wanted <= progress.relayed.keys():
            batches = await consumer.getmany(timeout_ms=200)
            for tp, records in batches.items():
                for record in records:
                    change = _policy_change(record.value)
                    if change is None or change.version != progress.version:
                        continue
                    if change.route in wanted and change.route not in progress.relayed:
                        progress.relayed[change.route] = (tp.partition, record.offset)
    finally:
        await consumer.stop()


async def _check_folded(admin: AIOKafkaAdminClient, settings: Settings, progress: Progress) -> None:
    """Mark the keys whose partition the workers' group committed past their record."""
    waiting = {k: at for k, at in progress.relayed.items() if k not in progress.folded}
    partitions = sorted({TopicPartition(settings.topics.routing, p) for p, _ in waiting.values()})
    committed = await admin.list_consumer_group_offsets(settings.app_id, partitions=partitions)
    for key, (partition, offset) in waiting.items():
        position = committed.get(TopicPartition(settings.topics.routing, partition))
        if position is not None and position.offset > offset:
            progress.folded.add(key)


def _policy_change(value: bytes | None) -> PolicyChanged | None:
    if not value or _CHANGED not in value:
        return None
    try:
        parsed = json.loads(value)
        if not isinstance(parsed, dict) or parsed.get("type") != "policy.changed":
            return None
        return PolicyChanged.model_validate_json(value)
    except ValueError:  # not JSON, or not a policy change: not the relay's
        return None


def _consumer(settings: Settings) -> AIOKafkaConsumer:
    return standalone_consumer(
        bootstrap_servers(settings.broker),
        settings,
        fetch_max_wait_ms=fetch_max_wait_ms(),
        # A routing-log record can hold a request of up to a megabyte and its envelope.
        max_partition_fetch_bytes=settings.producer_max_request_size,
    )


async def _partitions(consumer: AIOKafkaConsumer, settings: Settings) -> list[TopicPartition]:
    topic = settings.topics.routing
    await consumer._client.force_metadata_update()
    numbers = consumer.partitions_for_topic(topic)
    if not numbers:
        raise LookupError(f"topic {topic!r} does not exist (no worker has started)")
    return [TopicPartition(topic, n) for n in sorted(numbers)]
