"""What the embedded stack's processes take from the calling environment."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from app.embedded.stack import TRANSPORT_TUNING_ENV, EmbeddedStack
from app.settings import Settings


@pytest.fixture
def stack() -> Iterator[EmbeddedStack]:
    built = EmbeddedStack()  # nothing started: a broker object and a work directory
    yield built
    shutil.rmtree(built.workdir, ignore_errors=True)


def test_transport_tuning_reaches_the_stacks_processes(
    stack: EmbeddedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bench comparing fetch waits or lingers must change them in the worker and the
    gateway too, not only in its own client (some of stop 21's comparisons did)."""
    monkeypatch.setenv("SWITCHYARD_FETCH_MAX_WAIT_MS", "4")
    monkeypatch.setenv("SWITCHYARD_FETCH_IDLE_WAIT_MS", "30")
    monkeypatch.setenv("SWITCHYARD_PRODUCER_LINGER_MS", "0")
    env = stack.worker_env(0)
    assert env["SWITCHYARD_FETCH_MAX_WAIT_MS"] == "4"
    assert env["SWITCHYARD_FETCH_IDLE_WAIT_MS"] == "30"
    assert env["SWITCHYARD_PRODUCER_LINGER_MS"] == "0"


def test_other_switchyard_variables_of_the_shell_do_not(
    stack: EmbeddedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A developer's shell (a log level, a console URL, another broker) does not change
    what the demo and the end-to-end tests run."""
    monkeypatch.setenv("SWITCHYARD_LOG_LEVEL", "debug")
    monkeypatch.setenv("SWITCHYARD_CONSOLE_URL", "http://elsewhere.test")
    monkeypatch.setenv("SWITCHYARD_BROKER", "kafka://elsewhere.test:9092")
    env = stack.worker_env(0)
    assert "SWITCHYARD_LOG_LEVEL" not in env
    assert "SWITCHYARD_CONSOLE_URL" not in env
    assert env["SWITCHYARD_BROKER"] == stack.broker.url


def test_the_tuning_names_are_settings() -> None:
    fields = {f"SWITCHYARD_{name.upper()}" for name in Settings.model_fields}
    assert set(TRANSPORT_TUNING_ENV) <= fields
