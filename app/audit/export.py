"""``switchyard export``: the recorded streams as JSON Lines, one file per stream.

* ``routing.jsonl``: ``{"partition": P, "offset": O, "event": {...}}`` per routing-log
  record, the event exactly as recorded (``null`` when it was unreadable).
* ``decisions.jsonl``, ``outcomes.jsonl``, ``responses.jsonl``: one recorded event per
  line, exactly as recorded (the columns are the event fields, see README).
* ``manifest.json``: format, source, topic names, counts, routing start offsets.

``--redact`` blanks message contents in the routing log and completion message
contents in responses (hashes, lengths and every routing input stay), so an
export can leave the team without prompts or completions; replay is unaffected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.audit.log import EXPORT_FORMAT, STREAMS, RecordedLog, topic_names
from app.settings import Topics


def write_export(
    log: RecordedLog, directory: Path, topics: Topics, *, redact: bool = False
) -> dict[str, Any]:
    """Write the export; returns the manifest."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in STREAMS:
        with (directory / f"{name}.jsonl").open("w", encoding="utf-8") as out:
            for entry in log.stream(name):
                raw = entry.raw if entry.event is not None else "null"
                if redact and raw != "null":
                    raw = redact_record(name, raw)
                if name == "routing":
                    out.write(
                        f'{{"partition":{entry.partition},"offset":{entry.offset},"event":{raw}}}\n'
                    )
                elif entry.event is not None:
                    out.write(raw + "\n")
    manifest = {
        "format": EXPORT_FORMAT,
        "source": log.source,
        "topics": topic_names(topics),
        "counts": log.counts(),
        "unreadable": log.unreadable(),
        "routing_start": {str(p): o for p, o in sorted(log.routing_start.items())},
        "redacted": redact,
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    return manifest


def redact_record(stream: str, raw: str) -> str:
    """The record with message and completion text replaced by null."""
    value = json.loads(raw)
    if stream == "routing":
        _blank_messages(value.get("request"))
        if isinstance(value.get("retry"), dict):
            _blank_messages(value["retry"].get("request"))
    elif stream == "responses" and isinstance(value.get("completion"), dict):
        for choice in value["completion"].get("choices") or []:
            if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                choice["message"]["content"] = None
    # json.dumps writes floats with repr: they round-trip exactly.
    return json.dumps(value, separators=(",", ":"))


def _blank_messages(request: Any) -> None:
    if isinstance(request, dict):
        for message in request.get("messages") or []:
            if isinstance(message, dict):
                message["content"] = None
