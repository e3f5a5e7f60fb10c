"""The policy topic: proposing a policy, numbering versions, following them.

The topic has one partition; its order is the order of the versions. A proposal
whose document equals the version in force is no new version (a worker that
starts with the same file, a SIGHUP without a change). :func:`number_versions`
is the one rule: the relay, every worker's follower and ``switchyard policy
history`` apply it to the same records and get the same numbers.

:meth:`PolicyFollower.catch_up` is what ingest and the gateway call before they refuse a
request naming a route or preset they do not know: a read of the topic that began after
the request came, so a version proposed before the request was sent is known.
:func:`relay_keys` names the routing-log keys a version is relayed to, for the relay and
for ``switchyard policy apply --wait``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer, TopicPartition
from pydantic import ValidationError

from app.compat.tansu import fetch_max_wait_ms, true_end_offsets
from app.contract import derived_id, ledger_key
from app.contract.policy import PolicyDocument, PolicyProposed, PolicySource
from app.kafka import (
    DURABLE_PRODUCER,
    bootstrap_servers,
    client_security,
    ensure_topics,
    standalone_consumer,
)
from app.routing.book import PolicyBook, document_hash
from app.settings import Settings

log = logging.getLogger(__name__)

#: The shortest time between the starts of two reads :meth:`PolicyFollower.catch_up` makes
#: (seconds): a stream of requests naming unknown routes costs at most ten reads a second.
CATCH_UP_INTERVAL_S = 0.1


@dataclass(frozen=True, slots=True)
class Version:
    number: int
    #: Offset of the proposal on the policy topic.
    offset: int
    proposal: PolicyProposed


def number_versions(
    proposals: Iterable[tuple[int, PolicyProposed]], known: list[Version] | None = None
) -> list[Version]:
    """The versions among ``proposals`` (in topic order), after those already ``known``."""
    versions = list(known or [])
    for offset, proposal in proposals:
        if versions and offset <= versions[-1].offset:
            continue
        if versions and versions[-1].proposal.hash == proposal.hash:
            continue  # the same policy again: no version
        versions.append(Version(len(versions) + 1, offset, proposal))
    return versions


def proposal(document: PolicyDocument, source: PolicySource, **extra: int) -> PolicyProposed:
    now = datetime.now(UTC)
    digest = document_hash(document)
    return PolicyProposed(
        id=derived_id("policy.proposed", digest, source, now.isoformat()),
        occurred_at=now,
        hash=digest,
        document=document,
        source=source,
        rollback_of=extra.get("rollback_of"),
    )


async def propose(settings: Settings, proposed: PolicyProposed) -> int:
    """Publish a proposal and wait for the broker's acknowledgement; its offset."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers(settings.broker),
        max_request_size=settings.producer_max_request_size,
        **DURABLE_PRODUCER,
        **client_security(settings),
    )
    await producer.start()
    try:
        sent = await producer.send_and_wait(
            settings.topics.policy, proposed.model_dump_json().encode(), key=b"policy"
        )
        return int(sent.offset)
    finally:
        await producer.stop()


@dataclass
class PolicyFollower:
    """Every version on the policy topic, read in order, as a :class:`PolicyBook`."""

    settings: Settings
    book: PolicyBook = field(default_factory=PolicyBook)
    versions: list[Version] = field(default_factory=list)
    #: The next offset to read.
    next_offset: int = 0
    unreadable: int = 0
    #: When the last read of the topic that ended began (``time.monotonic()``; 0: none).
    read_since: float = 0.0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def refresh(self) -> list[Version]:
        """Read what was added since the last call; return the new versions."""
        async with self._lock:
            return await self._read()

    async def catch_up(self, since: float) -> list[Version]:
        """Return once a read of the topic that began at ``since`` (``time.monotonic()``) or
        later has ended; the new versions it found. A caller holding a request that came
        after ``since`` then knows every version proposed before that request was sent.
        Callers share the reads, which begin at most every :data:`CATCH_UP_INTERVAL_S`."""
        async with self._lock:
            if self.read_since >= since:
                return []
            pause = self.read_since + CATCH_UP_INTERVAL_S - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            return await self._read()

    async def _read(self) -> list[Version]:
        began = time.monotonic()
        records = await _read_from(self.settings, self.next_offset)
        proposals: list[tuple[int, PolicyProposed]] = []
        for offset, value in records:
            self.next_offset = offset + 1
            try:
                proposals.append((offset, PolicyProposed.model_validate_json(value)))
            except ValidationError:
                self.unreadable += 1  # not a proposal: no version, never fatal
        before = len(self.versions)
        self.versions = number_versions(proposals, self.versions)
        for version in self.versions[before:]:
            self.book.add(version.number, version.proposal.document, version.proposal.hash)
        self.read_since = max(self.read_since, began)
        return self.versions[before:]

    async def through(self, offset: int, timeout_s: float = 10.0) -> None:
        """Wait until the proposal at ``offset`` has been read."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.next_offset <= offset:
            await self.refresh()
            if self.next_offset <= offset:
                if loop.time() > deadline:
                    raise TimeoutError(f"policy topic: offset {offset} not readable")
                await asyncio.sleep(0.05)

    def version_at(self, offset: int) -> Version | None:
        """The version the proposal at ``offset`` made (None: it changed nothing)."""
        return next((v for v in self.versions if v.offset == offset), None)

    def previous(self, version: Version) -> Version | None:
        return self.versions[version.number - 2] if version.number > 1 else None

    def relay_keys(self, version: Version) -> list[str]:
        """The routing-log keys ``version`` is relayed to (:func:`relay_keys`)."""
        previous = self.previous(version)
        return relay_keys(self.book, version.number, None if previous is None else previous.number)


def relay_keys(book: PolicyBook, version: int, previous: int | None) -> list[str]:
    """The routing-log keys a version is relayed to, sorted: the routes and the budgets'
    ledgers of the version and of the one before it (whose removed routes and ledgers
    learn that they are gone)."""
    keys: set[str] = set()
    for number in (version, previous):
        policy = None if number is None else book.get(number)
        if policy is not None:
            keys.update(policy.config.route_names())
            keys.update(ledger_key(budget.key) for budget in policy.config.budgets)
    return sorted(keys)


async def bootstrap(
    settings: Settings, document: PolicyDocument, book: PolicyBook | None = None
) -> PolicyFollower:
    """At a worker's start: the versions so far (into ``book``); if there is none,
    ``document`` (the worker's providers file) becomes version 1."""
    await ensure_topics(settings)
    follower = PolicyFollower(settings, book=PolicyBook() if book is None else book)
    await follower.refresh()
    if not follower.versions:
        await propose(settings, proposal(document, "start"))
        for _ in range(200):
            if await follower.refresh() or follower.versions:
                break
            await asyncio.sleep(0.05)
        if not follower.versions:
            raise TimeoutError("the policy topic does not show the first version")
    return follower


async def _read_from(settings: Settings, start: int) -> list[tuple[int, bytes]]:
    """The policy topic's records from ``start`` to its end."""
    bootstrap_hosts = bootstrap_servers(settings.broker)
    partition = TopicPartition(settings.topics.policy, 0)
    consumer = standalone_consumer(bootstrap_hosts, settings, fetch_max_wait_ms=fetch_max_wait_ms())
    await consumer.start()
    try:
        consumer.assign([partition])
        reported = await consumer.end_offsets([partition])
        if settings.tansu_compat:
            reported = await true_end_offsets(bootstrap_hosts, reported)
        end = reported[partition]
        if start >= end:
            return []
        consumer.seek(partition, start)
        records: list[tuple[int, bytes]] = []
        while not records or records[-1][0] < end - 1:
            batch = await consumer.getmany(partition, timeout_ms=1000)
            got = batch.get(partition, [])
            if not got:
                break
            records += [(r.offset, r.value or b"") for r in got if r.offset < end]
        return records
    finally:
        await consumer.stop()
