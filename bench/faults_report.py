"""The figures and the report of ``switchyard bench faults`` (pure): per scenario and mode,
what the clients got, wall times, provider calls and attempt outcomes; per scenario a
verdict.

A scenario is **good** when every request ended as it should: the canonical answer
(``rescued``), except ``content_filter`` (a clean 400 error: no other model can help).
``context_length`` may be either: its fallback has the larger window, so the answer is
best, and a clean 400 is what a route without such a model can give. It is **bad**
when a client hung, got a wrong or cut answer with no error, a connection broken, or an
error past the bound; **poor** otherwise (clean errors where a rescue was possible, or
streams that ended with an error event).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.fault_answer import TOKENS
from bench.faults_client import CLASSES, Result

#: What a well-conducted gateway gives the client, by scenario (default: the answer).
EXPECTED: dict[str, frozenset[str]] = {
    "context_length": frozenset({"clean_error", "rescued"}),
    "content_filter": frozenset({"clean_error"}),
}
BAD = frozenset({"hang", "truncated", "broken", "slow_error"})
SHORT = {
    "rescued": "rescued",
    "clean_error": "clean err",
    "slow_error": "slow err",
    "stream_error": "stream err",
    "truncated": "truncated",
    "hang": "hang",
    "broken": "broken",
}


def expected(scenario: str) -> frozenset[str]:
    return EXPECTED.get(scenario, frozenset({"rescued"}))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise(
    scenarios: list[str], results: list[Result], flapping_log: list[dict[str, Any]], flap_s: float
) -> list[dict[str, Any]]:
    """One entry per scenario: its rows (one per mode) and its verdict."""
    entries = []
    for scenario in scenarios:
        mine = [r for r in results if r.scenario == scenario]
        rows = [_row([r for r in mine if r.mode == mode]) for mode in ("json", "stream")]
        entry: dict[str, Any] = {"scenario": scenario, "rows": rows}
        entry["verdict"] = _verdict(scenario, mine)
        if scenario == "flapping":
            after = [c for c in flapping_log if c["at_s"] >= flap_s]
            entry["calls_after_recovery"] = len(after)
            entry["requests_after_recovery"] = sum(1 for r in mine if r.started_s >= flap_s)
        entries.append(entry)
    return entries


def _row(results: list[Result]) -> dict[str, Any]:
    walls = [r.elapsed_s for r in results]
    firsts = [r.first_token_s for r in results if r.first_token_s is not None]
    outcomes: Counter[str] = Counter()
    for result in results:
        for o in result.extra.get("outcomes", []):
            who = "fb" if str(o.get("deployment", "")).startswith("fb-") else "primary"
            outcomes[f"{who} {o.get('status_class')}"] += 1
    return {
        "mode": results[0].mode if results else "",
        "requests": len(results),
        "classes": {c: n for c in CLASSES if (n := sum(r.outcome == c for r in results))},
        "statuses": dict(Counter(_status(r) for r in results)),
        "wall_p50_s": percentile(walls, 0.5),
        "wall_max_s": max(walls) if walls else None,
        "first_token_p50_s": percentile(firsts, 0.5),
        "calls_primary": sum(int(r.extra.get("calls_primary", 0)) for r in results),
        "calls_fallback": sum(int(r.extra.get("calls_fallback", 0)) for r in results),
        "outcomes": dict(sorted(outcomes.items())),
        "received": dict(Counter(_received(r) for r in results)),
    }


def _status(result: Result) -> str:
    if result.outcome == "hang":
        return "timeout"
    if result.status is None:
        return "none"
    code = f" {result.error_code}" if result.error_code and result.status != 200 else ""
    return f"{result.status}{code}"


def _received(result: Result) -> str:
    """What the text received is beside the canonical answer: ``60/60``, ``40/60``
    (a start of it), ``≠`` (something else)."""
    if not result.prefix:
        return f"≠ ({result.chars} chars)"
    return f"{result.tokens_matched}/{TOKENS}"


def _verdict(scenario: str, results: list[Result]) -> str:
    classes = {r.outcome for r in results}
    if classes & BAD:
        return "bad"
    return "good" if classes <= expected(scenario) else "poor"


# --------------------------------------------------------------------------- the report


def report(summary: dict[str, Any]) -> list[str]:
    settings = summary["settings"]
    faults = settings["faults"]
    lines = [
        f"{settings['requests_per_mode']} requests per scenario and mode through the gateway "
        f"(openai SDK, max_retries=0, client timeout {settings['client_timeout_s']:g} s, "
        f"clean error within {settings['error_bound_s']:g} s); provider timeout "
        f"{settings['provider_timeout_ms']} ms; slow first token "
        f"{faults['slow_first_token_s']:g} s, flapping {faults['flap_s']:g} s, "
        f"429 for the first {faults['rate_limited_calls']} calls; "
        f"fallback prefill: {'yes' if settings.get('fallback_prefill') else 'no'}; "
        f"broker {settings.get('broker', 'tansu')}; bench {summary.get('bench_s', '?')} s",
        "",
        "| scenario | mode | client got | statuses | wall p50 / max s | calls primary / fallback "
        "| attempt outcomes (llm.outcomes) | received vs canonical |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for entry in summary["scenarios"]:
        for row in entry["rows"]:
            lines.append(_table_row(entry["scenario"], row))
    lines += ["", "Verdicts:"]
    for entry in summary["scenarios"]:
        lines.append(_verdict_line(entry))
    replayed = summary.get("replay")
    if replayed:
        lines += [
            "",
            f"Replay of the whole log: {replayed['reproduced']} / {replayed['decisions']} "
            f"decisions and {replayed['responses_reproduced']} / {replayed['responses']} "
            f"answers reproduced, {replayed['mismatched']} mismatched "
            f"({'ok' if replayed['ok'] else 'FAILED'})",
        ]
    return lines


def _table_row(scenario: str, row: dict[str, Any]) -> str:
    got = ", ".join(f"{SHORT[c]} {n}" for c, n in row["classes"].items()) or "-"
    statuses = ", ".join(f"{s} ×{n}" for s, n in row["statuses"].items())
    wall = f"{_num(row['wall_p50_s'])} / {_num(row['wall_max_s'])}"
    calls = f"{row['calls_primary']} / {row['calls_fallback']}"
    outcomes = ", ".join(f"{k} ×{n}" for k, n in row["outcomes"].items()) or "-"
    received = ", ".join(f"{k} ×{n}" for k, n in row["received"].items())
    cells = [scenario, row["mode"], got, statuses, wall, calls, outcomes, received]
    return "| " + " | ".join(cells) + " |"


def _verdict_line(entry: dict[str, Any]) -> str:
    parts = []
    for row in entry["rows"]:
        got = ", ".join(f"{n} {SHORT[c]}" for c, n in row["classes"].items())
        parts.append(f"{row['mode']} {got} (p50 {_num(row['wall_p50_s'])} s)")
    fallback = sum(row["calls_fallback"] for row in entry["rows"])
    line = f"- `{entry['scenario']}`: **{entry['verdict']}**: {'; '.join(parts)}; "
    line += f"fallback called {fallback} times"
    if "calls_after_recovery" in entry:
        line += (
            f"; {entry['requests_after_recovery']} requests sent after recovery, "
            f"{entry['calls_after_recovery']} calls to the flapping deployment then"
        )
    return line


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
