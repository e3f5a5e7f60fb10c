"""A replay's mismatch between a recorded decision or response and the re-derived one.

Apart from :mod:`app.audit.replay_report` because the worker processes of a parallel
replay make them too (:mod:`app.audit.replay_compare`), and import nothing of the log
readers or the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from app.contract import Decision, Response

MismatchKind = Literal["differs", "not_rederived", "not_recorded"]


@dataclass(frozen=True)
class Mismatch:
    kind: MismatchKind
    #: ``decision`` or ``response``.
    record: str
    event_id: str
    request_id: str
    attempt: int
    #: ``path: recorded X, replayed Y`` lines (at most a few per record).
    differences: list[str] = field(default_factory=list)
    #: not_recorded only: made by an event past the router's last recorded output on
    #: its partition, so the router may simply not have processed it yet.
    pending: bool = False
    #: (partition, offset) of the routing-log event that re-derived it (None: not re-derived).
    origin: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "pending": self.pending,
            "record": self.record,
            "id": self.event_id,
            "request_id": self.request_id,
            "attempt": self.attempt,
            "differences": self.differences,
        }


def diff(recorded: Any, replayed: Any, path: str = "", limit: int = 8) -> list[str]:
    """Where two JSON-like values differ, as ``path: recorded X, replayed Y`` lines."""
    out: list[str] = []
    _diff(recorded, replayed, path, out, limit)
    return out


def _diff(a: Any, b: Any, path: str, out: list[str], limit: int) -> None:
    if len(out) >= limit:
        return
    if path == "completion" and (a is None) != (b is None):
        out.append(
            f"completion: recorded {'none' if a is None else 'one'}, "
            f"replayed {'none' if b is None else 'one'}"
        )
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            _diff(
                a.get(key, "<absent>"),
                b.get(key, "<absent>"),
                f"{path}.{key}".lstrip("."),
                out,
                limit,
            )
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}[{index}]", out, limit)
        return
    if a != b or type(a) is not type(b):
        if path.startswith("completion"):  # never print completion text
            out.append(f"{path}: recorded and replayed differ (content not shown)")
        else:
            out.append(f"{path}: recorded {a!r}, replayed {b!r}")


def differences(original: Decision | Response, again: Decision | Response) -> list[str] | None:
    """None: the same record (every field, floats bit for bit); else where they differ."""
    if original == again:
        return None
    return diff(original.model_dump(), again.model_dump())


def mismatch(
    kind: MismatchKind,
    record: Decision | Response,
    differences: list[str] | None = None,
    origin: tuple[int, int] | None = None,
) -> Mismatch:
    """``record``'s mismatch; ``origin``: where it was re-derived (None: not re-derived)."""
    if isinstance(record, Decision):
        name, attempt = "decision", record.attempt
    else:
        name, attempt = "response", record.attempts
    return Mismatch(
        kind, name, record.id, record.request_id, attempt, differences or [], origin=origin
    )


def advance(progress: dict[int, int], origin: tuple[int, int]) -> None:
    """``progress`` (routing partition -> offset of the last event whose output is in the
    record) past ``origin``, the (partition, offset) of an event whose output is."""
    partition, offset = origin
    if offset > progress.get(partition, -1):
        progress[partition] = offset


def pending(found: Mismatch, progress: dict[int, int]) -> Mismatch:
    """``found`` with ``pending`` set when it is a record re-derived but not recorded whose
    event comes after the router's last recorded output on its partition (``progress``:
    routing partition -> offset of that event)."""
    if found.kind != "not_recorded" or found.origin is None:
        return found
    partition, offset = found.origin
    return replace(found, pending=offset > progress.get(partition, -1))


#: The order of a replay's mismatches: by record, kind, origin, then as found.
KIND_ORDER = {"differs": 0, "not_rederived": 1, "not_recorded": 2}
