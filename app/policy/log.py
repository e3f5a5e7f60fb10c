"""The policy topic: proposing a policy, numbering versions, following them.

The topic has one partition; its order is the order of the versions. A proposal
whose document equals the version in force is no new version (a worker that
starts with the same file, a SIGHUP without a change). :func:`number_versions`
is the one rule: the relay, every worker's follower and ``switchyard policy
history`` apply it to the same records and get the same numbers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from pydantic import ValidationError

from app.compat.tansu import fetch_max_wait_ms, true_end_offsets
from app.contract import derived_id
from app.contract.policy import PolicyDocument, PolicyProposed, PolicySource
from app.kafka import DURABLE_PRODUCER, bootstrap_servers, client_security, ensure_topics
from app.routing.book import PolicyBook, document_hash
from app.settings import Settings

log = logging.getLogger(__name__)


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


async def propose(settings: Settings, proposed: PolicyProposed) -> None:
    """Publish a proposal and wait for the broker's acknowledgement."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers(settings.broker),
        max_request_size=settings.producer_max_request_size,
        **DURABLE_PRODUCER,
        **client_security(settings),
    )
    await producer.start()
    try:
        await producer.send_and_wait(
            settings.topics.policy, proposed.model_dump_json().encode(), key=b"policy"
        )
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
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def refresh(self) -> list[Version]:
        """Read what was added since the last call; return the new versions."""
        async with self._lock:
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
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_hosts,
        enable_auto_commit=False,
        group_id=None,
        fetch_max_wait_ms=fetch_max_wait_ms(),
        **client_security(settings),
    )
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
