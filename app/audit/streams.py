"""Every streamed answer, put back together from the deltas topic.

``switchyard streams [REQUEST_ID]`` reads ``switchyard.deltas`` (``SWITCHYARD_TOPIC_DELTAS``)
from its start and prints, per request and per call of each attempt, the text the
stream carried, how it ended (``ok``, ``failed`` or ``open``: its worker died before the
end), its finish reason and usage, and any sequence numbers missing. The call that
ended ``ok`` is the request's answer: its text is the completion on ``llm.responses``.
:func:`reassemble` is the pure part, for analysts' own tools.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ValidationError

from app.contract import StreamDelta
from app.execution.pieces import merge_tool_call, whole_text


@dataclass
class Stream:
    """One call's stream."""

    request_id: str
    attempt: int
    call_id: str
    deployment: str
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    refusal: str | None = None
    #: ``ok``, ``failed``, or ``open`` (no end marker).
    end: str = "open"
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    deltas: int = 0
    #: Sequence numbers below the last one seen that never came.
    missing: list[int] = field(default_factory=list)


def reassemble(deltas: Iterable[StreamDelta]) -> list[Stream]:
    """The streams the deltas make, by request, attempt and call (duplicates dropped)."""
    calls: dict[tuple[str, int, str], dict[int, StreamDelta]] = {}
    for delta in deltas:
        key = (delta.request_id, delta.attempt, delta.call_id)
        calls.setdefault(key, {}).setdefault(delta.seq, delta)
    streams = [_stream(by_seq) for _, by_seq in sorted(calls.items(), key=_order)]
    return streams


def answer_of(streams: Iterable[Stream], request_id: str) -> Stream | None:
    """The call that ended ``ok``: the request's answer."""
    done = [s for s in streams if s.request_id == request_id and s.end == "ok"]
    return done[-1] if done else None


def _order(item: tuple[tuple[str, int, str], dict[int, StreamDelta]]) -> tuple[Any, ...]:
    (request_id, attempt, _), by_seq = item
    return request_id, attempt, min(d.occurred_at for d in by_seq.values())


def _stream(by_seq: dict[int, StreamDelta]) -> Stream:
    ordered = [by_seq[seq] for seq in sorted(by_seq)]
    first = ordered[0]
    stream = Stream(first.request_id, first.attempt, first.call_id, first.deployment)
    text: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for delta in ordered:
        text.append(delta.content)
        refusal.append(delta.refusal or "")
        for call in delta.tool_calls or []:
            merge_tool_call(calls, call)
        if delta.end is not None:
            stream.end, stream.finish_reason = delta.end, delta.finish_reason
            stream.usage, stream.error = delta.usage, delta.error
    stream.tool_calls = [calls[i] for i in sorted(calls)]
    stream.content = whole_text("".join(text))
    stream.refusal = whole_text("".join(refusal)) or None
    stream.deltas = len(ordered)
    stream.missing = sorted(set(range(ordered[-1].seq)) - set(by_seq))
    return stream


def parse(values: Iterable[bytes | None]) -> tuple[list[StreamDelta], int]:
    """The deltas among raw records, and how many records were not deltas."""
    deltas, unreadable = [], 0
    for value in values:
        try:
            deltas.append(StreamDelta.model_validate_json(value or b""))
        except ValidationError:
            unreadable += 1
    return deltas, unreadable


async def read_streams(bootstrap: str, topic: str, timeout_s: float) -> tuple[list[Stream], int]:
    from app.client import read_raw

    records = await read_raw(bootstrap, [topic], idle_s=1.5, timeout_s=timeout_s)
    deltas, unreadable = parse(record.value for record in records)
    return reassemble(deltas), unreadable


def render(streams: list[Stream], unreadable: int) -> str:
    lines = []
    for s in streams:
        head = f"{s.request_id} attempt {s.attempt} call {s.call_id[:8]} {s.deployment}: {s.end}"
        if s.finish_reason:
            head += f" ({s.finish_reason})"
        if s.error:
            head += f" [{s.error}]"
        if s.missing:
            head += f" missing deltas {s.missing}"
        lines.append(f"{head}; {s.deltas} deltas, {len(s.content)} chars")
        lines.append(f"  {s.content!r}")
    lines.append(f"{len(streams)} streams; {unreadable} unreadable records")
    return "\n".join(lines)


def streams_command(args: argparse.Namespace) -> int:
    from app.kafka import bootstrap_servers
    from app.settings import get_settings

    settings = get_settings()
    bootstrap = bootstrap_servers(args.broker or settings.broker)
    streams, unreadable = asyncio.run(read_streams(bootstrap, settings.topics.deltas, args.timeout))
    if args.request_id:
        streams = [s for s in streams if s.request_id == args.request_id]
    if args.json:
        print(json.dumps({"streams": [asdict(s) for s in streams], "unreadable": unreadable}))
    else:
        print(render(streams, unreadable))
    return 0 if streams or not args.request_id else 1


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "streams", help="reassemble streamed answers from the deltas topic"
    )
    parser.add_argument("request_id", nargs="?", help="only this request")
    parser.add_argument("--broker", help="host:port (default: SWITCHYARD_BROKER)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to read")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.set_defaults(run=streams_command)
