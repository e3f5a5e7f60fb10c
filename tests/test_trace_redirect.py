"""With a console, a worker's /admin/trace answers from the store, not the topics."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest
from stack_helpers import chat, collect, publish

from app.console.server import start_console
from app.embedded.broker import EmbeddedBroker, free_port
from app.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.broker


async def test_the_workers_trace_redirects_to_the_consoles_store(broker: EmbeddedBroker) -> None:
    port = free_port()
    stack = EmbeddedStack(
        broker=broker,
        namespace=f"t{uuid.uuid4().hex[:8]}",
        time_scale=0.05,
        env={"SWITCHYARD_CONSOLE_URL": f"http://127.0.0.1:{port}"},
    )
    await stack.start()
    console = await start_console(stack.console_settings(), port=port)
    try:
        await publish(stack, [chat("traced-1")])
        await collect(stack, {stack.topics.responses: 1}, timeout_s=60)
        web = stack.workers[0].web_url
        async with httpx.AsyncClient() as client:
            first = await client.get(f"{web}/admin/trace/traced-1", timeout=10)
            assert first.status_code == 307
            assert first.headers["location"] == f"http://127.0.0.1:{port}/admin/trace/traced-1"
            deadline = time.monotonic() + 60
            while True:  # the sink folds what the worker wrote
                reply = await client.get(
                    f"{web}/admin/trace/traced-1", timeout=10, follow_redirects=True
                )
                if reply.status_code == 200 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
        assert reply.status_code == 200, reply.text
        trace = reply.json()
        assert trace["request_id"] == "traced-1" and trace["attempts"]
        assert trace["response"]["status"] == "ok"
    finally:
        await console.stop()
        await stack.stop()
