"""Replay, export and audit against a live worker's topics on the embedded broker."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_e2e import SECRET_PROMPT, chat, collect, publish

from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker


async def switchyard(stack: EmbeddedStack, *args: str) -> tuple[int, str]:
    """``switchyard ARGS`` in a child process with the worker's environment."""
    env = stack.worker_env(0)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert not done.stderr or done.returncode == 0, done.stderr.decode()
    return done.returncode, done.stdout.decode()


async def test_replay_export_and_audit_of_a_live_log(stack: EmbeddedStack, tmp_path: Path) -> None:
    ids = [f"audit-{i}" for i in range(30)]
    await publish(stack, [chat(i) for i in ids])
    seen = await collect(stack, {stack.topics.responses: len(ids)})
    assert {r["request_id"] for r in seen[stack.topics.responses]} == set(ids)

    code, out = await switchyard(stack, "replay", "--json")
    report = json.loads(out)
    assert code == 0, report
    assert report["decisions"] >= len(ids) and report["mismatched"] == 0
    assert report["reproduced"] == report["decisions"] == report["rederived"]
    assert list(report["recorded_config_hashes"]) == [report["replay_config_hash"]]

    export = tmp_path / "export"
    code, out = await switchyard(stack, "export", str(export))
    assert code == 0 and f"decisions {report['decisions']}" in out
    code, out = await switchyard(stack, "replay", "--from-export", str(export), "--json")
    assert code == 0 and json.loads(out)["reproduced"] == report["decisions"]
    # Worker processes: the broker's records and the export's lines read as texts.
    code, texts = await switchyard(stack, "replay", "--jobs", "2", "--json")
    assert code == 0 and json.loads(texts)["reproduced"] >= report["decisions"]
    code, parallel = await switchyard(
        stack, "replay", "--from-export", str(export), "--jobs", "2", "--json"
    )
    assert code == 0 and parallel == out

    decisions = [json.loads(line) for line in (export / "decisions.jsonl").read_text().splitlines()]
    request_id = max(decisions, key=lambda d: d["attempt"])["request_id"]
    code, out = await switchyard(stack, "audit", request_id, "--json", "--verify")
    trace: dict[str, Any] = json.loads(out)
    assert code == 0 and trace["request_id"] == request_id
    assert trace["attempts"] and all(
        a["decision"]["reproduced_by_replay"] for a in trace["attempts"]
    )
    assert trace["response"]["status"] in {"ok", "error"}
    assert SECRET_PROMPT not in out

    port = stack.workers[0].env["SWITCHYARD_WEB_PORT"]
    async with httpx.AsyncClient() as client:
        reply = await client.get(f"http://127.0.0.1:{port}/admin/trace/{request_id}", timeout=30)
        missing = await client.get(f"http://127.0.0.1:{port}/admin/trace/nope", timeout=30)
    assert reply.status_code == 200 and reply.json()["attempts"] == [
        {**a, "decision": {**a["decision"], "reproduced_by_replay": None}}
        for a in trace["attempts"]
    ]
    assert missing.status_code == 404
