"""The layout: the event contract at the bottom, Faust only where a worker starts."""

from __future__ import annotations

import json
import subprocess
import sys


def modules_after(statement: str) -> list[str]:
    """Every module a fresh interpreter holds after running ``statement``."""
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    return list(json.loads(out.splitlines()[-1]))


def test_the_event_contract_imports_no_other_app_module() -> None:
    loaded = modules_after("import app.events")
    ours = {m for m in loaded if m == "app" or m.startswith("app.")}
    assert ours == {"app", "app.events", "app.contract", "app.contract.features"}
    assert not {m for m in loaded if m.split(".")[0] in {"faust", "httpx", "yaml"}}
