"""``switchyard up`` as an operator runs it: where its servers listen, who may read them,
when its lines are printed, and ``--providers``.

* Every server of the stack (broker, worker web, gateway, console, simulated providers)
  listens on 127.0.0.1, never on every interface.
* With ``SWITCHYARD_ADMIN_TOKEN`` and ``SWITCHYARD_METRICS_TOKEN`` set, every view but the
  probes of every process refuses a request without the token (401) and answers one with
  it; the views are read from the servers' own router tables.
* Each ``name=URL`` line is printed once its server accepts connections, ``worker
  running`` once the worker's ``/readyz`` answers ready.
* ``up --providers FILE`` routes to the file's providers (a copy of it), with no
  simulated provider; a bad file is one line, before anything starts.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from llmock.testing import LLMockServer
from pydantic import SecretStr
from up_helpers import (
    Command,
    accepts,
    descendants,
    listeners,
    process_name,
    wait_gone,
    wait_ready,
)

from app.analytics.store import Store
from app.console.server import build_app as console_app
from app.embedded import kafka
from app.gateway.run import LOCAL_KEY
from app.gateway.server import build_app as gateway_app
from app.gateway.service import Gateway
from app.settings import Settings
from app.web_auth import METRICS_PATH, OPEN_PATHS

pytestmark = pytest.mark.broker

ADMIN_TOKEN = f"up-admin-{secrets.token_hex(8)}"
METRICS_TOKEN = f"up-metrics-{secrets.token_hex(8)}"
TOKENS = {"SWITCHYARD_ADMIN_TOKEN": ADMIN_TOKEN, "SWITCHYARD_METRICS_TOKEN": METRICS_TOKEN}
AS_ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
AS_METRICS = {"Authorization": f"Bearer {METRICS_TOKEN}"}
#: The ``name=URL`` lines of every ``up``, in the order they are printed.
SERVERS = ("broker", "web", "gateway", "console")
#: The gateway's ``x-switchyard-request-id``: the request the trace views are asked about.
REQUEST_ID_HEADER = "x-switchyard-request-id"


@dataclass
class Up:
    """A running ``up``, and what was true the moment each of its lines was printed."""

    command: Command
    urls: dict[str, str]
    provider_urls: list[str]
    #: Whether each printed server (by name or URL) accepted a connection as it was printed.
    accepting_when_printed: dict[str, bool] = field(default_factory=dict)
    #: ``/readyz``'s status as ``worker running`` was printed (None: no answer).
    ready_when_printed: int | None = None

    @property
    def pids(self) -> set[int]:
        return {self.command.process.pid} | descendants(self.command.process.pid)


def observe(command: Command) -> Up:
    """Read ``up``'s lines as they come, trying each server the moment it is named."""
    up = Up(command, {}, [])
    for name in SERVERS:
        up.urls[name] = command.value(name)
        up.accepting_when_printed[name] = accepts(up.urls[name])
    command.wait_for("providers file")
    up.provider_urls = [x.split()[2] for x in command.lines if x.startswith("provider ")]
    for url in up.provider_urls:
        up.accepting_when_printed[url] = accepts(url)
    command.wait_for("worker running")
    try:
        up.ready_when_printed = httpx.get(
            f"{up.urls['web']}/readyz", headers=AS_ADMIN, timeout=5
        ).status_code
    except httpx.HTTPError:
        up.ready_when_printed = None
    wait_ready(up.urls["web"])  # the checks below need a ready worker, whenever it was
    return up


def port_of(url: str) -> int:
    port = urlsplit(url if "//" in url else f"//{url}").port
    assert port is not None, url
    return port


def scan(up: Up) -> list[str]:
    """The listening sockets of ``up``'s process tree, one line each (for the report)."""
    return [f"{x.host}:{x.port} {process_name(x.pid)}" for x in listeners(up.pids)]


@pytest.fixture(scope="module")
def guarded() -> Iterator[Up]:
    """``switchyard up`` with an admin and a metrics token, simulated providers."""
    command = Command("up", env=TOKENS)
    try:
        yield observe(command)
    finally:
        command.stop()


def test_every_server_of_up_listens_on_loopback_only(guarded: Up) -> None:
    found = listeners(guarded.pids)
    print("\n".join(scan(guarded)))
    assert [x for x in found if x.wildcard] == [], scan(guarded)
    assert {x.host for x in found} == {"127.0.0.1"}, scan(guarded)
    printed = {port_of(url) for url in [*guarded.urls.values(), *guarded.provider_urls]}
    assert printed <= {x.port for x in found}, scan(guarded)


def test_up_prints_a_server_only_once_it_accepts_connections(guarded: Up) -> None:
    assert guarded.accepting_when_printed == dict.fromkeys(guarded.accepting_when_printed, True)
    assert guarded.ready_when_printed == 200


def _send(gateway: str, request_id: str) -> httpx.Response:
    """One chat request through ``up``'s gateway, with its request id chosen."""
    body = {"model": "chat", "messages": [{"role": "user", "content": "hello"}]}
    headers = {"Authorization": f"Bearer {LOCAL_KEY}", REQUEST_ID_HEADER: request_id}
    return httpx.post(f"{gateway}/chat/completions", json=body, headers=headers, timeout=60)


def _worker_paths(web: str) -> list[str]:
    """Every path the worker serves (its router table, ``/admin/routes``)."""
    reply = httpx.get(f"{web}/admin/routes", headers=AS_ADMIN, timeout=10)
    assert reply.status_code == 200, reply.text
    return [str(route["path"]) for route in reply.json()["routes"]]


def _console_admin_paths() -> list[str]:
    """The console's ``/admin/*`` paths, from its router table."""
    app = console_app(Store(None), SecretStr("any"))
    paths = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    return sorted(p for p in paths if p.startswith("/admin/"))


def _gateway_admin_paths() -> list[str]:
    """The gateway's ``/admin/*`` paths (none today), from its router table."""
    stand_in = cast(Gateway, SimpleNamespace(settings=Settings()))
    routes = gateway_app(stand_in).router.routes()
    paths = {r.resource.canonical for r in routes if r.resource is not None}
    return sorted(p for p in paths if p.startswith("/admin/"))


def _answered(url: str, headers: dict[str, str], timeout_s: float = 60.0) -> httpx.Response:
    """GET ``url`` until it answers 200 (the console's sink folds the topics behind)."""
    deadline = time.monotonic() + timeout_s
    while True:
        reply = httpx.get(url, headers=headers, timeout=10)
        if reply.status_code != 404 or time.monotonic() >= deadline:
            return reply
        time.sleep(0.5)


def _check_guarded(url: str) -> None:
    """401 without the token or with a wrong one; with it 200, or a redirect whose target
    answers 200 with the token."""
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        refused = httpx.get(url, headers=headers, timeout=10)
        assert refused.status_code == 401, (url, headers.keys(), refused.status_code)
    reply = _answered(url, AS_ADMIN)
    if reply.is_redirect:
        reply = _answered(reply.headers["Location"], AS_ADMIN)
    assert reply.status_code == 200, (url, reply.status_code, reply.text[:200])


def test_every_view_of_every_process_needs_the_token(guarded: Up) -> None:
    request_id = f"up-guarded-{secrets.token_hex(4)}"
    answered = _send(guarded.urls["gateway"], request_id)
    assert answered.headers.get(REQUEST_ID_HEADER) == request_id, answered.text[:200]

    def concrete(path: str) -> str:
        return re.sub(r"\{[^}]+\}", request_id, path)

    web = guarded.urls["web"]
    worker_paths = _worker_paths(web)
    assert {"/admin/bandit/stats", "/admin/budgets", "/admin/routes"} <= set(worker_paths)
    for path in worker_paths:
        if path in OPEN_PATHS:
            assert httpx.get(f"{web}{path}", timeout=10).status_code == 200, path
        elif path != METRICS_PATH:
            _check_guarded(f"{web}{concrete(path)}")

    # /metrics: its own token, or the admin one.
    assert httpx.get(f"{web}{METRICS_PATH}", timeout=10).status_code == 401
    for headers in (AS_METRICS, AS_ADMIN):
        assert httpx.get(f"{web}{METRICS_PATH}", headers=headers, timeout=10).status_code == 200

    console = guarded.urls["console"].rstrip("/")
    assert "/admin/trace/{request_id}" in _console_admin_paths()
    for path in _console_admin_paths():
        _check_guarded(f"{console}{concrete(path)}")
    gateway = guarded.urls["gateway"].removesuffix("/v1")
    for path in _gateway_admin_paths():
        _check_guarded(f"{gateway}{concrete(path)}")


# -- up --providers -------------------------------------------------------------------


@dataclass
class OwnProviders:
    up: Up
    mock: LLMockServer
    file: Path
    text: str


def _own_file(directory: Path, mock: LLMockServer) -> Path:
    provider: dict[str, Any] = {"id": "openai-mock", "base_url": mock.base_url("openai")}
    provider.update(api_key="sk-mock-0000", timeout_ms=10_000, models=[{"name": "gpt-4o-mini"}])
    keys = [{"sha256": "0" * 64, "name": "theirs"}]  # kept beside the stack's local key
    config = {"providers": [provider], "routes": {"chat": {"providers": ["openai-mock"]}}}
    path = directory / "my-providers.yaml"
    path.write_text(yaml.safe_dump({**config, "gateway_keys": keys}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnProviders]:
    """``switchyard up --providers FILE``, FILE naming one llmock server."""
    with LLMockServer() as mock:
        path = _own_file(tmp_path_factory.mktemp("own"), mock)
        text = path.read_text(encoding="utf-8")
        command = Command("up", "--providers", str(path))
        try:
            yield OwnProviders(observe(command), mock, path, text)
        finally:
            command.stop()


def test_up_with_a_providers_file_routes_to_its_providers_only(own: OwnProviders) -> None:
    lines = own.up.command.lines
    assert not [x for x in lines if x.startswith("provider ")], lines
    before = len(own.mock.state.journal)
    request_id = f"up-own-{secrets.token_hex(4)}"
    answered = _send(own.up.urls["gateway"], request_id)
    assert answered.status_code == 200, answered.text[:300]
    assert answered.headers["x-switchyard-deployment"] == "openai-mock:gpt-4o-mini"
    assert answered.json()["choices"][0]["message"]["content"]
    calls = own.mock.state.journal.records()[before:]
    assert [r.path for r in calls] == ["/v1/chat/completions"], calls
    # No other server than the stack's own four: no simulated provider.
    found = listeners(own.up.pids)
    assert {x.port for x in found} == {port_of(u) for u in own.up.urls.values()}, scan(own.up)
    assert all(own.up.accepting_when_printed.values())


def test_the_providers_file_is_copied_not_changed(own: OwnProviders) -> None:
    assert own.file.read_text(encoding="utf-8") == own.text
    (copy_line,) = [x for x in own.up.command.lines if x.startswith("providers file ")]
    copy = Path(copy_line.removeprefix("providers file "))
    assert copy != own.file
    names = [k.get("name") for k in yaml.safe_load(copy.read_text())["gateway_keys"]]
    assert names == ["theirs", "local"]


def test_a_bad_providers_file_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("providers:\n  - id: x\n    base_url: not a url\n", encoding="utf-8")
    command = Command("up", "--providers", str(bad))
    assert command.exited() == 2, command.lines
    assert [x for x in command.lines if x.strip()] == [
        next(x for x in command.lines if x.startswith("switchyard: configuration error: "))
    ], command.lines
    assert str(bad) in command.lines[0]


def test_up_says_so_and_stops_when_its_worker_is_not_ready_in_time() -> None:
    command = Command("up", "--ready-timeout", "1")
    assert command.exited() == 1, command.lines
    assert "worker running; Ctrl-C to stop" not in command.lines
    # Listening or not yet (a worker starts in about a second): either phase is reported.
    assert any(
        x.startswith("switchyard: the worker was not ") and " within 1 s " in x
        for x in command.lines
    ), command.lines
    broker = next(x for x in command.lines if x.startswith("broker=")).removeprefix("broker=")
    assert not accepts(broker)  # stopped with it


@pytest.mark.skipif(not kafka.available(), reason="Apache Kafka needs a JDK and Maven")
def test_up_on_apache_kafka_serves_on_loopback_and_leaves_no_jvm() -> None:
    """``up --broker kafka``: the same lines, every listener (the JVM's broker and
    controller ports too) on 127.0.0.1, a request answered; SIGKILLed, nothing remains."""
    command = Command("up", "--broker", "kafka", env=TOKENS)
    try:
        up = observe(command)
        found = listeners(up.pids)
        assert [x for x in found if x.wildcard] == [], scan(up)
        assert {x.host for x in found} == {"127.0.0.1"}, scan(up)
        java = {x.pid for x in found if process_name(x.pid).startswith("java ")}
        assert len(java) == 1 and port_of(up.urls["broker"]) in {x.port for x in found}, scan(up)
        answered = _send(up.urls["gateway"], f"up-kafka-{secrets.token_hex(4)}")
        assert answered.status_code == 200, answered.text[:300]
        every = up.pids
    finally:
        command.kill()  # SIGKILL: the JVM, the worker and the rest die with it
    assert wait_gone(every - {command.process.pid}, time.monotonic() + 30) == set()
