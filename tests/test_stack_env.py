"""What the embedded stack's processes take from the calling environment."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from app.embedded.broker import EmbeddedBroker
from app.embedded.child_env import INHERITED_SETTINGS, child_env
from app.embedded.stack import TRANSPORT_TUNING_ENV, EmbeddedStack, Worker
from app.kafka_security import KafkaSecurity
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
    gateway too, not only in its own client (a comparison made that way measures nothing)."""
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


TOKENS_AND_SECURITY = {
    "SWITCHYARD_ADMIN_TOKEN": "admin-secret-0001",
    "SWITCHYARD_METRICS_TOKEN": "metrics-secret-0001",
    "SWITCHYARD_WEB_HOST": "127.0.0.2",
    "SWITCHYARD_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "SWITCHYARD_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "SWITCHYARD_KAFKA_SASL_USERNAME": "switchyard",
    "SWITCHYARD_KAFKA_SASL_PASSWORD": "kafka-secret-0001",
}


def test_the_tokens_bind_host_and_kafka_security_reach_the_stacks_workers(
    stack: EmbeddedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's admin token guards the worker ``up`` starts, not only its console."""
    for name, value in TOKENS_AND_SECURITY.items():
        monkeypatch.setenv(name, value)
    env = stack.worker_env(0)
    assert {k: env.get(k) for k in TOKENS_AND_SECURITY} == TOKENS_AND_SECURITY
    headers = Worker(env, stack.workdir / "worker.log").admin_headers
    assert headers == {"Authorization": "Bearer admin-secret-0001"}


def test_the_settings_given_to_a_stack_reach_its_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``up`` gives the stack its settings: they, not the shell's of the moment, count."""
    given = Settings(
        admin_token=SecretStr("given-admin"),
        metrics_token=SecretStr("given-metrics"),
        kafka_security=KafkaSecurity(ssl_check_hostname=False),
        producer_linger_ms=3,
    )
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "the-shell-s")
    built = EmbeddedStack(settings=given)
    try:
        env = built.worker_env(0)
        assert env["SWITCHYARD_ADMIN_TOKEN"] == "given-admin"
        assert env["SWITCHYARD_METRICS_TOKEN"] == "given-metrics"
        assert env["SWITCHYARD_KAFKA_SSL_CHECK_HOSTNAME"] == "false"
        assert env["SWITCHYARD_PRODUCER_LINGER_MS"] == "3"
        assert built.settings().admin_token == SecretStr("given-admin")  # gateway, console
    finally:
        shutil.rmtree(built.workdir, ignore_errors=True)


def test_a_child_reads_back_the_settings_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in TOKENS_AND_SECURITY.items():
        monkeypatch.setenv(name, value)
    caller = Settings()
    env = child_env(caller, base={})
    for name in list(os.environ):
        if name.startswith("SWITCHYARD_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    child = Settings()
    for name in INHERITED_SETTINGS:
        assert getattr(child, name) == getattr(caller, name), name
    assert child.kafka_security == caller.kafka_security


def test_programs_that_are_not_switchyards_get_no_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "admin-secret-0002")
    monkeypatch.setenv("PATH_LIKE_VARIABLE", "kept")
    env = child_env(None)
    assert not [k for k in env if k.startswith("SWITCHYARD_")]
    assert env["PATH_LIKE_VARIABLE"] == "kept"


@pytest.mark.broker
def test_the_embedded_broker_does_not_see_the_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tansu (and llama-server) need no Switchyard setting: a token does not reach them."""
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "admin-secret-0003")
    with EmbeddedBroker() as broker:
        process = broker._process
        assert process is not None
        environ = Path(f"/proc/{process.pid}/environ").read_bytes()
    assert b"admin-secret-0003" not in environ
    assert b"SWITCHYARD_" not in environ
