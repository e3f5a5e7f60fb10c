"""Waiting for an embedded worker (``switchyard up``): bounded, and clear when it fails."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from app.config.schema import ConfigError
from app.embedded.broker import free_port
from app.embedded.stack import Worker, WorkerNotReady
from app.gateway.keys import hash_key
from app.gateway.run import add_local_key


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    """A Worker whose process is a stand-in (nothing listens on its port)."""
    log = tmp_path / "worker.log"
    log.write_text("starting\nconfiguration error: something named here\n", encoding="utf-8")
    built = Worker({"SWITCHYARD_WEB_PORT": str(free_port())}, log)
    yield built
    if built.process is not None:
        built.kill()


async def test_a_worker_that_exits_is_an_error_naming_its_code(worker: Worker) -> None:
    worker.process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(WorkerNotReady, match="exited with code 3 before it was ready") as caught:
        await worker.wait_ready(timeout_s=60)
    assert caught.value.log_tail[-1] == "configuration error: something named here"


async def test_a_worker_that_never_listens_is_an_error_when_the_wait_ends(worker: Worker) -> None:
    worker.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(WorkerNotReady, match=r"not accepting connections within 0.5 s"):
        await worker.wait_listening(timeout_s=0.5)
    with pytest.raises(WorkerNotReady, match=r"not ready within 0.5 s \(not listening\)"):
        await worker.wait_ready(timeout_s=0.5)
    assert worker.running  # the caller decides what to stop


def test_the_local_key_joins_the_files_own_keys(tmp_path: Path) -> None:
    """A providers file with its own ``gateway_keys`` keeps them (a second top-level
    ``gateway_keys`` would replace them)."""
    path = tmp_path / "providers.yaml"
    theirs = {"sha256": "0" * 64, "name": "theirs"}
    path.write_text(yaml.safe_dump({"providers": [], "gateway_keys": [theirs]}), encoding="utf-8")
    add_local_key(path, "sk-local")
    keys = yaml.safe_load(path.read_text(encoding="utf-8"))["gateway_keys"]
    assert keys == [theirs, {"sha256": hash_key("sk-local"), "name": "local"}]


def test_the_local_key_needs_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text("- a list\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not a mapping"):
        add_local_key(path, "sk-local")
