"""JSON Schemas of the events, generated from the models into ``schemas/``."""

from __future__ import annotations

import json
from pathlib import Path

from app.contract import INTERNAL_EVENTS, PUBLIC_EVENTS

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


def rendered() -> dict[str, str]:
    """File name -> canonical JSON text, for every event model."""
    files = {}
    for name, model in {**PUBLIC_EVENTS, **INTERNAL_EVENTS}.items():
        schema = model.model_json_schema(mode="serialization")
        files[f"{name}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return files


def write_or_check(check: bool, directory: Path = SCHEMA_DIR) -> list[str]:
    """Write the schemas (or with ``check``, only compare). Returns the stale file names."""
    stale = []
    for name, text in rendered().items():
        path = directory / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            stale.append(name)
            if not check:
                directory.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    return stale
