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
    loaded = modules_after("import app.contract")
    ours = {m for m in loaded if m == "app" or m.startswith("app.")}
    contract = {m for m in ours if m == "app.contract" or m.startswith("app.contract.")}
    assert ours - contract == {"app"}
    assert "app.contract.features" in contract
    above = {"faust", "httpx", "yaml", "opentelemetry"}  # tracing is no part of the contract
    assert not {m for m in loaded if m.split(".")[0] in above}


def test_no_app_module_builds_the_faust_app() -> None:
    """Faust's application, its agents, tables and views are built when a worker starts
    (agents/, tables/), never by importing ``app``."""
    loaded = modules_after(
        "import importlib, pkgutil, app\n"
        "for m in pkgutil.walk_packages(app.__path__, 'app.'):\n"
        "    importlib.import_module(m.name)"
    )
    assert "app.cli" in loaded and "app.routing.fold" in loaded
    assert not {m for m in loaded if m.split(".")[0] in {"agents", "tables"}}


def _app_imports(package: str) -> set[str]:
    """Every ``app.…`` module the package's files import, at the top or inside a function."""
    import ast
    from pathlib import Path

    found: set[str] = set()
    for path in (Path(__file__).parent.parent / "app" / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("app.")}


def test_the_audit_imports_nothing_listed_above_it() -> None:
    """Replay, audit and the log export read the recorded topics; the analytics store,
    the console, the gateway and the embedded stack stand above them (README, Layout):
    ``switchyard export --format parquet`` lives with analytics for that reason."""
    above = {"app.analytics", "app.console", "app.gateway", "app.embedded", "app.cli"}
    imported = _app_imports("audit")
    assert not {m for m in imported for a in above if m == a or m.startswith(f"{a}.")}
    assert "app.audit.log" in imported  # the check reads the package
