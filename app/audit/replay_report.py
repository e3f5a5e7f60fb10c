"""The report of ``switchyard replay``: its mismatches, its JSON and its text (the
re-derivation and the comparison are :mod:`app.audit.replay`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.audit.grades import GradeCheck
from app.audit.mismatch import Mismatch, MismatchKind, diff
from app.routing.keys import KeyState

__all__ = ["Mismatch", "MismatchKind", "ReplayReport", "diff", "render"]


@dataclass
class ReplayReport:
    source: str
    replay_config_hash: str
    recorded_config_hashes: dict[str, int]
    recorded: int
    rederived: int
    reproduced: int
    responses_recorded: int
    responses_rederived: int
    responses_reproduced: int
    mismatches: list[Mismatch]
    events: int
    applied: int
    skipped: int
    fold_errors: list[str]
    unreadable: dict[str, int]
    truncated_partitions: dict[int, int]
    allow_pending: bool = False
    grades: GradeCheck = field(default_factory=GradeCheck)
    states: dict[str, KeyState] = field(default_factory=dict, repr=False)
    #: The policy versions the log carries, with each one's config hash: the
    #: replay folded each route with the version in force, not with its own policy.
    policy_versions: dict[int, str] = field(default_factory=dict)

    def count(self, kind: MismatchKind, record: str = "decision") -> int:
        return sum(1 for m in self.mismatches if m.kind == kind and m.record == record)

    @property
    def mismatched(self) -> int:
        return self.count("differs")

    @property
    def pending(self) -> int:
        return sum(1 for m in self.mismatches if m.pending)

    @property
    def ok(self) -> bool:
        failing = [m for m in self.mismatches if not (m.pending and self.allow_pending)]
        clean = not self.fold_errors and not self.truncated_partitions
        return not failing and clean and self.grades.ok

    @property
    def config_differs(self) -> bool:
        used = {self.replay_config_hash, *self.policy_versions.values()}
        return any(h not in used for h in self.recorded_config_hashes)

    def to_json(self, limit: int = 20) -> dict[str, Any]:
        return {
            "source": self.source,
            "ok": self.ok,
            "decisions": self.recorded,
            "reproduced": self.reproduced,
            "mismatched": self.mismatched,
            "recorded_not_rederived": self.count("not_rederived"),
            "rederived_not_recorded": self.count("not_recorded"),
            "pending": self.pending,
            "rederived": self.rederived,
            "responses": {
                "recorded": self.responses_recorded,
                "rederived": self.responses_rederived,
                "reproduced": self.responses_reproduced,
                "mismatched": self.count("differs", "response"),
                "recorded_not_rederived": self.count("not_rederived", "response"),
                "rederived_not_recorded": self.count("not_recorded", "response"),
            },
            "grades": self.grades.to_json(limit),
            "replay_config_hash": self.replay_config_hash,
            "recorded_config_hashes": self.recorded_config_hashes,
            "policy_versions": {str(v): h for v, h in self.policy_versions.items()},
            "routing_events": self.events,
            "applied": self.applied,
            "skipped_duplicates": self.skipped,
            "fold_errors": self.fold_errors[:limit],
            "unreadable": self.unreadable,
            "truncated_partitions": {str(p): o for p, o in self.truncated_partitions.items()},
            "first_mismatches": [m.to_json() for m in self.mismatches[:limit]],
        }


def render(report: ReplayReport, show: int = 5) -> str:
    lines = [
        f"source: {report.source}",
        f"routing log: {report.events} events folded, {report.applied} applied, "
        f"{report.skipped} skipped as duplicates (as the router did)",
        f"decisions: {report.recorded}, reproduced: {report.reproduced}, "
        f"mismatched: {report.mismatched}",
        f"recorded but not re-derived: {report.count('not_rederived')}; "
        f"re-derived but not recorded: {report.count('not_recorded')}",
        *(
            [
                f"pending: {report.pending} of the re-derived outputs come from events after the "
                "router's last recorded output on their partition (it may still be at work; "
                + ("tolerated: --allow-pending)" if report.allow_pending else "--allow-pending)")
            ]
            if report.pending
            else []
        ),
    ]
    lines.append(
        f"responses: {report.responses_recorded}, reproduced: {report.responses_reproduced}, "
        f"mismatched: {report.count('differs', 'response')}; recorded but not re-derived: "
        f"{report.count('not_rederived', 'response')}; re-derived but not recorded: "
        f"{report.count('not_recorded', 'response')}"
    )
    grades = report.grades
    lines.append(
        f"grades: {grades.recorded}, backed by their feedback and answer: {grades.verified}"
    )
    lines.extend(f"grade problem: {problem}" for problem in grades.problems[:show])
    hashes = ", ".join(f"{h} ({n})" for h, n in sorted(report.recorded_config_hashes.items()))
    lines.append(
        f"config_hash: replay policy {report.replay_config_hash}; recorded {hashes or '-'}"
    )
    if report.config_differs:
        lines.append(
            "WARNING: the replay policy's config hash differs from the recorded one: the replay "
            "runs under another providers file or other BANDIT_*/CB_* settings, so mismatches are "
            "expected. Use the worker's providers file (--providers) and environment."
        )
    for partition, offset in sorted(report.truncated_partitions.items()):
        lines.append(
            f"ERROR: routing partition {partition} starts at offset {offset}, not 0: "
            "history was truncated, the state cannot be rebuilt exactly"
        )
    for name, count in sorted(report.unreadable.items()):
        lines.append(f"unreadable {name} records: {count} (skipped, as the router does)")
    for error in report.fold_errors[:show]:
        lines.append(f"fold error (the router dead-letters these): {error}")
    for mismatch in report.mismatches[:show]:
        lines.append(
            f"{mismatch.kind}: {mismatch.record} {mismatch.event_id} "
            f"(request {mismatch.request_id!r}, attempt {mismatch.attempt})"
        )
        lines.extend(f"    {d}" for d in mismatch.differences)
    if len(report.mismatches) > show:
        lines.append(f"... and {len(report.mismatches) - show} more (--show N, --json)")
    lines.append("OK: every decision reproduced" if report.ok else "FAILED")
    return "\n".join(lines)
