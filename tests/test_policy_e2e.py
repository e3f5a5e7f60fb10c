"""Policy versions end to end: a policy applied live, SIGHUP, a rejected file, a rollback,
replay."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_helpers import chat, collect, publish, running_stack, switchyard

from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker
REMOVED = "openai-gpt-4.1"


@pytest.fixture
async def stack(broker: EmbeddedBroker) -> AsyncIterator[EmbeddedStack]:
    async with running_stack(broker, "v", warm=True, time_scale=0.05) as running:
        yield running


async def history(stack: EmbeddedStack) -> list[dict[str, Any]]:
    code, out = await switchyard(stack, "policy", "history", "--json")
    assert code == 0, out
    return [json.loads(line) for line in out.splitlines()]


async def wait_for_version(stack: EmbeddedStack, version: int, timeout_s: float = 60.0) -> None:
    """Until a new request is decided under ``version`` (the relay has reached its route)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        probe = f"probe-{version}-{uuid.uuid4().hex[:6]}"
        await publish(stack, [chat(probe)])
        seen = await collect(stack, {stack.topics.decisions: 1}, timeout_s=10)
        if any(
            d["request_id"] == probe and d["policy_version"] == version
            for d in seen[stack.topics.decisions]
        ):
            return
    raise AssertionError(f"version {version} never reached the route")


def without(path: Path, provider_id: str, target: Path) -> Path:
    config = yaml.safe_load(path.read_text())
    config["providers"] = [p for p in config["providers"] if p["id"] != provider_id]
    for route in (config.get("routes") or {}).values():
        route["providers"] = [p for p in route["providers"] if p != provider_id]
    target.write_text(yaml.safe_dump(config))
    return target


async def decisions_of(stack: EmbeddedStack, prefix: str, count: int) -> list[dict[str, Any]]:
    await publish(stack, [chat(f"{prefix}-{n}") for n in range(count)])
    seen = await collect(stack, {stack.topics.decisions: count + 20}, timeout_s=20)
    mine = [d for d in seen[stack.topics.decisions] if d["request_id"].startswith(prefix)]
    assert len({d["request_id"] for d in mine}) == count
    return mine


async def test_a_policy_applied_live_reloaded_rejected_and_rolled_back(
    stack: EmbeddedStack, tmp_path: Path
) -> None:
    original = stack.providers_file.read_text()
    (first,) = await history(stack)
    assert (first["version"], first["source"]) == (1, "start")
    assert REMOVED in first["providers"]

    # `policy apply`: the next version, on the running worker, without a restart.
    smaller = without(stack.providers_file, REMOVED, tmp_path / "smaller.yaml")
    code, out = await switchyard(stack, "policy", "apply", str(smaller))
    assert code == 0, out
    await wait_for_version(stack, 2)
    second = (await history(stack))[1]
    after = await decisions_of(stack, "v2", 30)
    assert {d["policy_version"] for d in after} == {2}
    assert REMOVED not in {d["provider"] for d in after}
    assert all(REMOVED not in [c["deployment"] for c in d["candidates"]] for d in after)

    # SIGHUP: the worker re-reads its own file.
    worker = stack.workers[0].process
    assert worker is not None
    stack.providers_file.write_text(original)
    worker.send_signal(signal.SIGHUP)
    await wait_for_version(stack, 3)
    assert [v["source"] for v in await history(stack)] == ["start", "apply", "sighup"]

    # An invalid file: one line naming the field, the policy in force stays.
    stack.providers_file.write_text(original.replace("base_url: http", "base_url: ftp", 1))
    worker.send_signal(signal.SIGHUP)
    log = stack.workers[0].log_path
    for _ in range(100):
        if "not reloaded" in log.read_text(errors="replace"):
            break
        await asyncio.sleep(0.1)
    line = next(x for x in log.read_text().splitlines() if "not reloaded" in x)
    assert "providers.0.base_url" in line
    assert len(await history(stack)) == 3
    code, out = await switchyard(stack, "policy", "apply", str(stack.providers_file))
    assert code == 2 and out == ""

    stack.providers_file.write_text(original)

    # A rollback is a new version with an old document.
    code, out = await switchyard(stack, "policy", "apply", "--version", "2")
    assert code == 0, out
    await wait_for_version(stack, 4)
    latest = (await history(stack))[-1]
    assert (latest["version"], latest["rollback_of"], latest["hash"]) == (4, 2, second["hash"])
    assert REMOVED not in latest["providers"]

    # Replay spans every version: each route folded with the version in force.
    code, out = await switchyard(stack, "replay", "--json", "--allow-pending")
    report = json.loads(out)
    assert code == 0, report["first_mismatches"]
    assert report["mismatched"] == 0
    assert sorted(report["policy_versions"]) == ["1", "2", "3", "4"]
