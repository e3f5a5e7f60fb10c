"""``switchyard bench gateway``'s pure parts: ``--apis`` and the report (no processes)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from bench.gateway_apis import APIS, parse_apis
from bench.gateway_report import report


def test_apis_are_named_and_measured_in_one_order() -> None:
    assert parse_apis("messages, chat") == ("chat", "messages")
    assert parse_apis("responses") == ("responses",)
    assert parse_apis(",".join(reversed(APIS))) == APIS
    for bad in ("", "chat,embeddings", " , "):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_apis(bad)


def _figures(p50: float, errors: int = 0) -> dict[str, Any]:
    phase = {"p50_ms": p50, "p99_ms": p50 + 5, "rps": 100.0, "errors": 0, "first_error": ""}
    return {
        "c1": phase,
        "rate20": {**phase, "cpu_ms": {"gateway": 1.0, "worker": 2.5}},
        "ttft": {"p50_ms": p50, "p99_ms": p50, "errors": errors, "first_error": "boom"},
        "saturation": {**phase, "cpu_ms": {}},
    }


def test_report_rows_are_apis_by_side_against_direct_chat() -> None:
    summary = {
        "latency_ms": 20,
        "requests": 10,
        "direct": {"chat": _figures(20.0)},
        "switchyard": {
            "chat": _figures(35.0),
            "responses": _figures(36.5, errors=2),
            "messages": "switchyard never answered (last: NotFoundError)",
        },
        "litellm": "skipped (--skip-litellm)",
    }
    lines = report(summary)
    rows = [line.split() for line in lines if line.lstrip().startswith(APIS)]
    assert [row[:2] for row in rows] == [["chat", "switchyard"], ["responses", "switchyard"]]
    chat = lines[next(i for i, line in enumerate(lines) if line.lstrip().startswith("chat"))]
    assert "15.0 / 15.0" in chat  # added p50 / p99 against the direct call
    assert "gateway 1.00 + worker 2.50" in chat
    assert lines[-3:] == [
        "litellm: skipped (--skip-litellm)",
        "switchyard POST /v1/responses first error: boom",
        "switchyard POST /v1/messages: switchyard never answered (last: NotFoundError)",
    ]
