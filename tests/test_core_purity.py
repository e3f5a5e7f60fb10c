"""The routing core depends on nothing above it, and reads no environment: a replay
folds with the parameters the log's policy documents carry, whatever the environment
of the machine that replays (docs/design.md, the event-sourcing contract)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from factories import T0, accepted, provider, routing_config
from log_harness import Log, replayed

from app.contract import Decision, StatusClass, derived_id
from app.contract.policy import PolicyChanged, PolicyDocument
from app.routing.answers import at
from app.routing.book import PolicyBook, document_hash
from app.routing.params import RoutingParams, env_names, params_from_env
from app.routing.policy import Policy

ROOT = Path(__file__).resolve().parent.parent
#: What importing the fold, the driver and the book must not load.
ABOVE_THE_CORE = (
    "app.settings",
    "pydantic_settings",
    "app.kafka_security",
    "app.policy.files",
    "yaml",
    "faust",
    "aiokafka",
    "httpx",
    "app.cli",
    "agents",
    "opentelemetry",  # tracing: never an input of a decision
    "app.telemetry",
)


def test_importing_the_core_loads_nothing_above_it() -> None:
    code = (
        "import sys, app.routing.fold, app.routing.driver, app.routing.book\n"
        f"print([m for m in {ABOVE_THE_CORE!r} if m in sys.modules])"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert found.stdout.strip() == "[]"


def test_no_core_module_reads_the_environment() -> None:
    schema = sorted((ROOT / "app" / "config").glob("*.py"))
    for path in [*sorted((ROOT / "app" / "routing").glob("*.py")), *schema]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "os" not in imported, path.name
        assert "app.settings" not in imported, path.name


def _other_value(name: str, default: Any) -> Any:
    """A valid value of the parameter other than its default."""
    if isinstance(default, Enum):
        return next(m.value for m in type(default) if m != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        candidates: list[Any] = [default + 1, default - 1]
    else:
        candidates = [default * 1.5, default * 0.9, 0.25, 0.9, 7.0]
    field = env_names()
    alias = field[name]
    for value in candidates:
        try:
            RoutingParams.model_validate({alias: value})
        except ValueError:
            continue
        if value != default:
            return value
    raise AssertionError(f"no other valid value for {name}")


@pytest.fixture
def hostile(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Every routing variable set to another valid value."""
    defaults = RoutingParams()
    env = {}
    for name, alias in env_names().items():
        value = _other_value(name, getattr(defaults, name))
        env[alias] = str(value).lower() if isinstance(value, bool) else str(value)
        monkeypatch.setenv(alias, env[alias])
    return env


def test_parameters_are_values_and_only_the_edge_reads_the_environment(
    hostile: dict[str, str],
) -> None:
    assert params_from_env(os.environ) != RoutingParams()
    assert params_from_env(os.environ) == params_from_env(hostile)
    assert Policy(config=routing_config(provider("a"))).params == RoutingParams.model_validate({})


def _document(**params: Any) -> PolicyDocument:
    config = routing_config(provider("a"), provider("b"), provider("c"))
    view = config.model_dump(mode="json", exclude={"gateway_keys": True})
    return PolicyDocument(config=view, params=params)


def test_a_document_missing_parameters_gets_defaults_not_the_environment(
    hostile: dict[str, str],
) -> None:
    book = PolicyBook()
    policy = book.add(1, _document(BANDIT_STRATEGY="ucb1"))
    assert policy.params == RoutingParams(BANDIT_STRATEGY="ucb1")  # type: ignore[call-arg]


def test_a_recorded_log_replays_exactly_under_a_hostile_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Recorded with no routing variable set; its policy document carries some
    # parameters only (as an older version wrote them).
    for alias in env_names().values():
        monkeypatch.delenv(alias, raising=False)
    doc = _document(CB_FAILURE_THRESHOLD=2)
    changed = PolicyChanged(
        id=derived_id("policy.changed", 1, "chat"), occurred_at=at(T0), route="chat",
        version=1, hash=document_hash(doc), document=doc, source="apply",
    )  # fmt: skip
    base = PolicyBook().add(1, doc)

    def flaky(decision: Decision) -> StatusClass:
        bad = decision.deployment.startswith("a:") and decision.attempt == 1
        return StatusClass.SERVER_ERROR if bad else StatusClass.SUCCESS

    log = Log(base, status=flaky)
    driver = log.run([changed])
    for n in range(60):
        driver = log.run([accepted(f"r{n}", T0 + n, offset=n)], driver)
    assert len(log.decisions) > 60  # some attempts failed and were retried

    # Replayed under another environment: every routing variable set otherwise.
    for name, alias in env_names().items():
        value = _other_value(name, getattr(RoutingParams(), name))
        monkeypatch.setenv(alias, str(value).lower() if isinstance(value, bool) else str(value))
    report = replayed(log, base)
    assert report.ok and report.mismatched == 0
    assert report.reproduced == len(log.decisions)
    # The log's own document decides, not the policy the replay is handed.
    hostile_policy = Policy(config=base.config, params=params_from_env(os.environ))
    assert replayed(log, hostile_policy).mismatched == 0
