"""A bad ``SWITCHYARD_*`` setting is one line naming it, exit code 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings, describe_error

ROOT = Path(__file__).resolve().parent.parent


def error_of(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as info:
        Settings()
    return describe_error(info.value)


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("SWITCHYARD_WEB_PORT", "0", "greater than or equal to 1"),
        ("SWITCHYARD_WEB_PORT", "65536", "less than or equal to 65535"),
        ("SWITCHYARD_PARTITIONS", "four", "valid integer"),
        ("SWITCHYARD_DATA_DIR", "/nonexistent-parent-17/data", "parent directory"),
        ("SWITCHYARD_MAX_INT_DIGITS", "5000", "less than or equal to 4300"),
        ("BANDIT_STRATEGY", "best", "'ucb1'"),
    ],
)
def test_the_error_names_the_variable_not_its_value(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, fragment: str
) -> None:
    line = error_of(monkeypatch, **{name: value})
    assert line.startswith(f"{name}: "), line
    assert fragment in line
    assert "\n" not in line


def test_the_data_dir_rule(tmp_path: Path) -> None:
    assert Settings(data_dir=Path("relative/not/yet/there")).data_dir  # made by the worker
    assert Settings(data_dir=tmp_path / "new").data_dir  # its parent exists
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValidationError, match="is not a directory"):
        Settings(data_dir=tmp_path / "file")
    with pytest.raises(ValidationError, match="does not exist"):
        Settings(data_dir=tmp_path / "missing" / "data")


def switchyard(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
    clean.update(SWITCHYARD_PROVIDERS=str(ROOT / "providers.example.yaml"), OPENAI_API_KEY="x")
    clean.update(ANTHROPIC_API_KEY="x", SWITCHYARD_BROKER="kafka://127.0.0.1:1", **env)
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("command", "env", "line"),
    [
        (
            "worker",
            {"SWITCHYARD_WEB_PORT": "0"},
            "switchyard: bad setting SWITCHYARD_WEB_PORT: "
            "Input should be greater than or equal to 1",
        ),
        (
            "worker",
            {"SWITCHYARD_DATA_DIR": "/nonexistent-parent-17/data"},
            "switchyard: bad setting SWITCHYARD_DATA_DIR: "
            "parent directory /nonexistent-parent-17 does not exist",
        ),
        (
            "demo",
            {"SWITCHYARD_PARTITIONS": "x"},
            "switchyard: bad setting SWITCHYARD_PARTITIONS: "
            "Input should be a valid integer, unable to parse string as an integer",
        ),
    ],
)
def test_the_command_prints_one_line_and_exits_2(
    command: str, env: dict[str, str], line: str
) -> None:
    done = switchyard(command, **env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == line
    assert "Traceback" not in done.stderr + done.stdout
