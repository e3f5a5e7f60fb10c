"""The report of ``switchyard bench gateway``: one row per API and side, against the mock
called directly with chat completions (the call both gateways make to it)."""

from __future__ import annotations

from typing import Any

from bench.gateway_apis import APIS, PATHS

SIDES = ("switchyard", "litellm")
#: The report's columns: heading, width.
COLUMNS = (
    ("API", 9),
    ("side", 10),
    ("c1 p50/p99", 13),
    ("added", 11),
    ("20/s p50/p99", 13),
    ("added", 11),
    ("TTFT p50", 8),
    ("overhead", 8),
    ("sat. req/s", 10),
    ("CPU ms/req 20/s", 26),
    ("CPU ms/req sat.", 26),
    ("errors", 6),
)


def report(summary: dict[str, Any]) -> list[str]:
    direct = summary["direct"]["chat"]
    lines = [
        f"mock latency {summary['latency_ms']} ms; {summary['requests']} requests per phase; "
        "each API through its official SDK; added = minus the mock called directly "
        "(chat completions, openai.AsyncOpenAI)",
        "direct: c1 {} ms, 20 req/s {} ms, stream TTFT p50 {} ms, saturation {} req/s".format(
            _pair(direct["c1"]),
            _pair(direct["rate20"]),
            _num(direct["ttft"]["p50_ms"]),
            _num(direct["saturation"]["rps"]),
        ),
        " ".join(f"{title:>{width}}" for title, width in COLUMNS),
    ]
    problems: list[str] = []
    for api in APIS:
        for side in SIDES:
            measured = summary.get(side)
            if isinstance(measured, str):
                if api == APIS[0]:
                    problems.append(f"{side}: {measured}")
                continue
            if measured is None or api not in measured:
                continue
            figures = measured[api]
            if isinstance(figures, str):
                problems.append(f"{side} {PATHS[api]}: {figures}")
                continue
            lines.append(_line(api, side, figures, direct))
            failed = [figures[p].get("first_error") for p in _PHASES if figures[p]["errors"]]
            if failed:
                problems.append(f"{side} {PATHS[api]} first error: {failed[0]}")
    return lines + problems


_PHASES = ("c1", "rate20", "ttft", "saturation")


def _line(api: str, side: str, figures: dict[str, Any], direct: dict[str, Any]) -> str:
    cells = [
        api,
        side,
        _pair(figures["c1"]),
        _added(figures["c1"], direct["c1"]),
        _pair(figures["rate20"]),
        _added(figures["rate20"], direct["rate20"]),
        _num(figures["ttft"]["p50_ms"]),
        _diff(figures["ttft"]["p50_ms"], direct["ttft"]["p50_ms"]),
        _num(figures["saturation"]["rps"]),
        _cpu(figures["rate20"]),
        _cpu(figures["saturation"]),
        str(sum(figures[p]["errors"] for p in _PHASES)),
    ]
    return " ".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, COLUMNS, strict=True))


def _cpu(phase: dict[str, Any]) -> str:
    cpu = phase.get("cpu_ms") or {}
    return " + ".join(f"{name} {ms:.2f}" for name, ms in cpu.items()) or "n/a"


def _pair(phase: dict[str, Any]) -> str:
    return f"{_num(phase['p50_ms'])} / {_num(phase['p99_ms'])}"


def _added(side: dict[str, Any], direct: dict[str, Any]) -> str:
    return f"{_diff(side['p50_ms'], direct['p50_ms'])} / {_diff(side['p99_ms'], direct['p99_ms'])}"


def _diff(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{a - b:.1f}"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"
