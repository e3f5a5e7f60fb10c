"""``switchyard export``: the recorded streams as JSON Lines, one file per stream.

* ``routing.jsonl``: ``{"partition": P, "offset": O, "event": {...}}`` per routing-log
  record, the event exactly as recorded (``null`` when it was unreadable).
* ``decisions.jsonl``, ``outcomes.jsonl``, ``responses.jsonl``: one recorded event per
  line, exactly as recorded (the columns are the event fields, see README).
* ``manifest.json``: format, source, topic names, counts, routing start offsets.
* ``policy.json`` (when the providers file was readable): the routing config
  without secrets and the routing parameters, with their config hash, so the
  export replays without the providers file (a config hash that differs from the
  recorded decisions' is reported by replay, as always).

``--redact`` blanks message contents and completion texts (in the routing log,
which carries both, and in responses); hashes, lengths and every routing input
stay, so an export can leave the team without prompts or completions and still
replays exactly (the router's responses are re-derived from the routing log's
completions, blanked the same way).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.audit.log import EXPORT_FORMAT, STREAMS, RecordedLog, topic_names
from app.config.schema import RoutingConfig
from app.routing.params import RoutingParams
from app.routing.policy import Policy
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
        _blank_completion(value.get("completion"))  # AttemptFinished carries the answer
    elif stream == "responses":
        _blank_completion(value.get("completion"))
    # json.dumps writes floats with repr: they round-trip exactly.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _blank_messages(request: Any) -> None:
    """Message contents to null; an embeddings request's texts to as many ``x``: their
    lengths are what routed it (a model's context window), the rest is blanked."""
    if isinstance(request, dict):
        for message in request.get("messages") or []:
            if isinstance(message, dict):
                message["content"] = None
        texts = request.get("input")
        if isinstance(texts, list):
            request["input"] = ["x" * len(t) if isinstance(t, str) else t for t in texts]


def _blank_completion(completion: Any) -> None:
    """A completion's texts to null; an embeddings answer's vectors too."""
    if isinstance(completion, dict):
        for choice in completion.get("choices") or []:
            if isinstance(choice, dict):
                for part in ("message", "delta"):
                    if isinstance(choice.get(part), dict):
                        choice[part]["content"] = None
                        choice[part].pop("reasoning_content", None)
        if completion.get("object") == "list":
            for item in completion.get("data") or []:
                if isinstance(item, dict) and "embedding" in item:
                    item["embedding"] = None


def write_policy(policy: Policy, directory: Path) -> None:
    """``policy.json``: what the worker decided with, without secrets."""
    fields = RoutingParams.model_fields
    view = {
        "config_hash": policy.config_hash,
        "config": policy.config.routing_view(),
        "params": {
            str(fields[name].validation_alias): value
            for name, value in policy.params.model_dump(mode="json").items()
        },
    }
    (directory / "policy.json").write_text(json.dumps(view, indent=2) + "\n", "utf-8")


def read_policy(directory: Path, overrides: dict[str, str] | None = None) -> Policy | None:
    """The exported policy (``overrides``: parameters to change), or None without one."""
    path = directory / "policy.json"
    if not path.is_file():
        return None
    view = json.loads(path.read_text(encoding="utf-8"))
    config = RoutingConfig.model_validate(view["config"])
    params = RoutingParams(**{**view["params"], **(overrides or {})})
    return Policy(config=config, params=params)
