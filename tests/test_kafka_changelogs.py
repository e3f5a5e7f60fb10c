"""On Apache Kafka the tables' changelogs are compacted topics: a route's row keeps its
last record, and the answers' rows also expire (``compact,delete``, tables/answers.py)."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from stack_helpers import warm_up

from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker


async def _configs(bootstrap: str, topics: list[str]) -> dict[str, dict[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resources = [ConfigResource(ConfigResourceType.TOPIC, topic) for topic in topics]
        answers: list[Any] = await admin.describe_configs(resources)
    finally:
        await admin.close()
    found: dict[str, dict[str, str]] = {}
    for answer in answers:
        for _code, _message, _kind, name, entries in answer.resources:
            found[name] = {entry[0]: entry[1] for entry in entries}
    return found


async def test_every_changelog_is_compacted(stack: EmbeddedStack) -> None:
    if stack.broker.is_tansu:
        pytest.skip("Tansu keeps no topic configs: compaction is Apache Kafka's")
    await warm_up(stack)
    app_id = f"switchyard-{stack.namespace}"
    names = {
        "route-state": "compact",
        "feedback-answers": "compact,delete",
        "feedback-expiry": "compact,delete",
    }
    topics = [f"{app_id}-{table}-changelog" for table in names]
    configs = await _configs(stack.broker.bootstrap, topics)
    policies = {topic: configs[topic]["cleanup.policy"] for topic in topics}
    assert policies == {f"{app_id}-{t}-changelog": p for t, p in names.items()}
