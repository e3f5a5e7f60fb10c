"""The pure parts of ``switchyard bench cluster``: the fault's timeline, what was measured.

Nothing here starts a process or reads a broker: the live side is :mod:`bench.cluster`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.queue_fates import error_kinds
from bench.throughput.stats import latency_dict

FAULTS = ("kill", "pause")
PHASES = ("before", "during", "after")


@dataclass(frozen=True)
class Timeline:
    """Seconds after the load starts: the fault, and the recovery (restart or SIGCONT)."""

    fault_at: float
    recover_at: float
    end_at: float


def timeline(fault: str, duration_s: float, pause_s: float) -> Timeline:
    """``kill``: SIGKILL at a third of the run, restart at two thirds; ``pause``: SIGSTOP at a
    third, SIGCONT ``pause_s`` later (within the run)."""
    if duration_s <= 0:
        raise ValueError("the run needs a positive duration")
    fault_at = duration_s / 3
    if fault == "kill":
        return Timeline(fault_at, 2 * duration_s / 3, duration_s)
    if fault == "pause":
        if not 0 < pause_s < duration_s - fault_at:
            raise ValueError(f"a pause of {pause_s:g}s does not fit after {fault_at:g}s")
        return Timeline(fault_at, fault_at + pause_s, duration_s)
    raise ValueError(f"fault {fault!r}: one of {', '.join(FAULTS)}")


def target_node(leaders: Mapping[int, int]) -> int:
    """The node leading the most partitions (the lowest id among equals)."""
    if not leaders:
        raise ValueError("no partition has a leader")
    return min(leaders, key=lambda node: (-leaders[node], node))


def phase_of(sent_at: float, fault_at: float, recovered_at: float) -> str:
    """``before`` the fault, ``during`` it (until the recovery began), ``after``."""
    if sent_at < fault_at:
        return "before"
    return "during" if sent_at < recovered_at else "after"


def answer_summary(
    sent: Mapping[str, float],
    responses: Iterable[Mapping[str, Any]],
    fault_at: float,
    recovered_at: float,
) -> dict[str, Any]:
    """Answered, lost, duplicates, errors, and latency per phase.

    ``sent``: request id → when it was handed to the producer (epoch s); ``responses``
    carry their broker timestamp as ``_ts``. A request's latency runs from its send to its
    first response's record.
    """
    copies: Counter[str] = Counter()
    first: dict[str, Mapping[str, Any]] = {}
    for response in responses:
        request_id = str(response.get("request_id"))
        if request_id not in sent:
            continue
        copies[request_id] += 1
        first.setdefault(request_id, response)
    lost = sorted(set(sent) - set(first))
    waits: dict[str, list[float]] = {phase: [] for phase in PHASES}
    counts: dict[str, Counter[str]] = {phase: Counter() for phase in PHASES}
    for request_id, at in sent.items():
        phase = phase_of(at, fault_at, recovered_at)
        counts[phase]["sent"] += 1
        answer = first.get(request_id)
        if answer is None:
            counts[phase]["lost"] += 1
            continue
        counts[phase]["answered"] += 1
        counts[phase]["ok"] += answer.get("status") == "ok"
        waits[phase].append(1000.0 * (float(answer["_ts"]) - at))
    return {
        "sent": len(sent),
        "answered": len(first),
        "ok": sum(1 for r in first.values() if r.get("status") == "ok"),
        "lost": len(lost),
        "lost_ids": lost[:100],
        "duplicate_answers": sum(n - 1 for n in copies.values()),
        "requests_answered_twice": sum(1 for n in copies.values() if n > 1),
        "errors": error_kinds(first.values()),
        "phases": {
            phase: {**dict(counts[phase]), "latency_ms": latency_dict(waits[phase])}
            for phase in PHASES
        },
    }


def replay_summary(data: Mapping[str, Any]) -> dict[str, Any]:
    """What ``ReplayReport.to_json`` says of decisions and responses, in short."""
    return {
        "ok": data["ok"],
        "decisions": {k: data[k] for k in ("decisions", "reproduced", "mismatched")},
        **replay_responses(data),
        "skipped_duplicates": data["skipped_duplicates"],
        "fold_errors": data["fold_errors"],
        "first_mismatches": data["first_mismatches"][:5],
    }


def replay_responses(data: Mapping[str, Any]) -> dict[str, Any]:
    """Of ``ReplayReport.to_json``: the responses' counts, the records (decisions and
    responses) not re-derived or not recorded, and the requests pending."""
    responses = data["responses"]
    return {
        "responses": {k: responses[k] for k in ("recorded", "reproduced", "mismatched")},
        "not_rederived": data["recorded_not_rederived"] + responses["recorded_not_rederived"],
        "not_recorded": data["rederived_not_recorded"] + responses["rederived_not_recorded"],
        "pending": data["pending"],
    }


def _ms(latency: Mapping[str, float] | None, key: str) -> str:
    return "–" if latency is None else f"{latency[key]:,.0f}"


def render(report: Mapping[str, Any]) -> str:
    """The report as Markdown: the run, the answers, latency per phase, replay, ISR."""
    answers, replay, isr = report["answers"], report.get("replay"), report.get("isr", {})
    fault = report["fault"]
    published = report.get("publish", {})
    lines = [
        f"## bench cluster: --fault {fault['kind']} of node {fault['node']} "
        f"(it led {fault['led_partitions']} of the requests'/routing partitions)",
        "",
        "| what | value |",
        "|---|---|",
        f"| load | {report['rate']:g} req/s for {report['minutes']:g} min, 1 worker, "
        "3 nodes (RF 3, min ISR 2)"
        + "".join(f", {k}={v}" for k, v in report.get("worker_env", {}).items())
        + " |",
        f"| fault | {fault['kind']} at +{fault['at_s']:.1f} s, recovery at "
        f"+{fault['recovered_at_s']:.1f} s (served again +{fault['served_at_s']:.1f} s) |",
        f"| sent | {answers['sent']} (publish failures: {published.get('failures', {}) or 0}) |",
        f"| answered (ok) | {answers['answered']} ({answers['ok']}) |",
        f"| lost (never answered) | {answers['lost']} |",
        f"| duplicate answers | {answers['duplicate_answers']} "
        f"({answers['requests_answered_twice']} requests) |",
        f"| errors by type | {_pairs(answers['errors'])} |",
    ]
    if replay is not None:
        decisions, responses = replay["decisions"], replay["responses"]
        lines.append(
            f"| replay: decisions reproduced / mismatched | {decisions['reproduced']} / "
            f"{decisions['mismatched']} of {decisions['decisions']} |"
        )
        lines.append(
            f"| replay: responses reproduced / mismatched | {responses['reproduced']} / "
            f"{responses['mismatched']} of {responses['recorded']} |"
        )
    back = isr.get("back_in_isr")
    lines.append(
        f"| node {fault['node']} back in every ISR | "
        + ("yes" if back else "no")
        + (f", {isr['seconds_after_recovery']:.1f} s after the recovery |" if back else " |")
    )
    lines.append(f"| load average start / end | {report['load_average_start']} / "
                 f"{report['load_average_end']} |")  # fmt: skip
    lines += [
        "",
        "| phase | sent | answered | ok | lost | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for phase in PHASES:
        row = answers["phases"][phase]
        latency = row["latency_ms"]
        lines.append(
            f"| {phase} | {row.get('sent', 0)} | {row.get('answered', 0)} | {row.get('ok', 0)} | "
            f"{row.get('lost', 0)} | {_ms(latency, 'p50')} | {_ms(latency, 'p99')} | "
            f"{_ms(latency, 'max')} |"
        )
    if report.get("errors"):
        lines += ["", f"run errors: {report['errors']}"]
    return "\n".join(lines)


def _pairs(counts: Mapping[str, int] | Sequence[Any]) -> str:
    if not counts:
        return "none"
    if isinstance(counts, Mapping):
        return ", ".join(f"{k} {v}" for k, v in counts.items())
    return str(counts)
