"""Secured Kafka: SASL and TLS settings reach every Kafka client, secrets stay.

The embedded broker (Tansu) speaks neither SASL nor TLS, so no test connects securely:
these tests check the plumbing (every construction site passes the one security helper,
what the helper builds, what Faust receives) and that no secret is printed.
"""

from __future__ import annotations

import ast
import shutil
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from pydantic import ValidationError

from app.client import RequestPublisher, TopicFollower
from app.config.schema import ConfigError
from app.kafka import client_security, client_security_kwargs, faust_security
from app.kafka_security import KafkaSecurity
from app.settings import Settings, describe_error

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "pa55-never-printed"
KAFKA_CLIENTS = {"AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient", "AIOKafkaClient"}
#: The helpers a construction site may spread into its arguments (app/kafka.py; the
#: analytics sink looks ``client_security_kwargs`` up through its own ``security_kwargs``).
HELPERS = {"client_security", "client_security_kwargs", "security_kwargs"}
#: The gateway's three clients, not yet built through the helpers.
PENDING = ("app/gateway/",)
#: Clients that only ever talk to a broker the process launched itself, in plaintext on
#: loopback (the embedded Kafka's readiness probe): the user's security settings describe
#: the user's cluster, never that one.
OWN_BROKER = ("app/embedded/kafka.py",)


def sasl(**extra: Any) -> Settings:
    fields: dict[str, Any] = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "switchyard",
        "sasl_password": PASSWORD,
        **extra,
    }
    return Settings(kafka_security=KafkaSecurity(**fields))


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return ""


def construction_sites() -> list[tuple[str, int, str, set[str]]]:
    """Every Kafka client or Faust app the project builds: (file, line, class, helpers)."""
    sites = []
    for package in ("app", "agents", "tables", "bench"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                called = _name(node.func)
                if called.split(".")[-1] not in KAFKA_CLIENTS and called != "faust.App":
                    continue
                spread = {
                    _name(kw.value.func).split(".")[-1]
                    for kw in node.keywords
                    if kw.arg is None and isinstance(kw.value, ast.Call)
                }
                relative = str(path.relative_to(ROOT))
                sites.append((relative, node.lineno, called, spread))
    return sites


def test_every_kafka_client_the_project_builds_takes_the_security_helper() -> None:
    sites = [s for s in construction_sites() if not s[0].startswith(PENDING + OWN_BROKER)]
    # The sites this change knows of (more may come; none may go unnoticed).
    assert len(sites) >= 14
    assert {"app/client.py", "app/audit/log.py", "app/worker/recall.py", "bench/poison.py"} <= {
        site[0] for site in sites
    }
    missing = [
        f"{file}:{line} {called}"
        for file, line, called, spread in sites
        if not (spread & ({"faust_security"} if called == "faust.App" else HELPERS))
    ]
    assert missing == [], f"pass **client_security() (app/kafka.py) at: {missing}"


def test_the_gateways_clients_take_it_too() -> None:
    sites = [s for s in construction_sites() if s[0].startswith(PENDING)]
    assert sites and all(spread & HELPERS for _, _, _, spread in sites)


def test_plaintext_adds_nothing_and_sasl_ssl_gives_every_client_the_same_arguments() -> None:
    assert client_security(Settings()) == {}
    assert faust_security(Settings()) == {}
    kwargs = client_security(sasl())
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_username"] == "switchyard"
    assert kwargs["sasl_plain_password"] == PASSWORD
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    context = kwargs["ssl_context"]
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert client_security_kwargs is client_security
    plain = client_security(
        Settings(
            kafka_security=KafkaSecurity(
                security_protocol="SASL_PLAINTEXT", sasl_username="u", sasl_password=PASSWORD
            )
        )
    )
    assert plain["sasl_mechanism"] == "PLAIN" and "ssl_context" not in plain


def test_faust_gets_the_same_credentials() -> None:
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        credentials = faust_security(sasl(sasl_mechanism=mechanism))["broker_credentials"]
        # What Faust's aiokafka driver hands its consumers, producers and admin client.
        auth = credentials_to_aiokafka_auth(credentials)
        assert auth["security_protocol"] == "SASL_SSL"
        assert auth["sasl_mechanism"] == mechanism
        assert auth["sasl_plain_username"] == "switchyard"
        assert auth["sasl_plain_password"] == PASSWORD
        assert isinstance(auth["ssl_context"], ssl.SSLContext)
        assert PASSWORD not in repr(credentials)


async def test_the_clients_are_built_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper with no argument reads the process's settings: set them as an operator would."""
    from app import settings as settings_module

    monkeypatch.setenv("SWITCHYARD_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("SWITCHYARD_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("SWITCHYARD_KAFKA_SASL_USERNAME", "switchyard")
    monkeypatch.setenv("SWITCHYARD_KAFKA_SASL_PASSWORD", PASSWORD)
    settings_module.get_settings.cache_clear()
    try:
        publisher = RequestPublisher("127.0.0.1:1")
        follower = TopicFollower("127.0.0.1:1", ["t"])
        admin = AIOKafkaAdminClient(bootstrap_servers="127.0.0.1:1", **client_security())
        clients = [publisher._producer.client, follower._consumer._client, admin._client]
        for client in clients:
            assert client._security_protocol == "SASL_PLAINTEXT"
            assert client._sasl_mechanism == "SCRAM-SHA-256"
            assert client._sasl_plain_password == PASSWORD
    finally:
        settings_module.get_settings.cache_clear()


def _self_signed(directory: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = directory / "client.pem", directory / "client.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=switchyard-test", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_tls_with_a_ca_a_client_certificate_and_no_hostname_check(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    security = KafkaSecurity(
        security_protocol="SSL",
        ssl_cafile=cert,
        ssl_certfile=cert,
        ssl_keyfile=key,
        ssl_check_hostname=False,
    )
    kwargs = client_security(Settings(kafka_security=security))
    assert kwargs.keys() == {"security_protocol", "ssl_context"}
    context = kwargs["ssl_context"]
    assert not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert any("switchyard-test" in str(ca) for ca in context.get_ca_certs())
    credentials = faust_security(Settings(kafka_security=security))["broker_credentials"]
    assert credentials_to_aiokafka_auth(credentials)["security_protocol"] == "SSL"


def test_inconsistent_settings_are_one_line_naming_variables_never_values(tmp_path: Path) -> None:
    cases = {
        "SWITCHYARD_KAFKA_SASL_PASSWORD": KafkaSecurity(
            security_protocol="SASL_SSL", sasl_username="u"
        ),
        "SWITCHYARD_KAFKA_SASL_USERNAME": KafkaSecurity(
            security_protocol="SASL_PLAINTEXT", sasl_password=PASSWORD
        ),
        "_SSL_KEYFILE go together": KafkaSecurity(
            security_protocol="SSL", ssl_certfile=tmp_path / "c.pem"
        ),
        "need SWITCHYARD_KAFKA_SECURITY_PROTOCOL": KafkaSecurity(ssl_cafile=tmp_path / "ca.pem"),
        "is not a readable file": KafkaSecurity(
            security_protocol="SSL", ssl_cafile=tmp_path / "missing.pem"
        ),
    }
    for expected, security in cases.items():
        with pytest.raises(ConfigError) as caught:
            client_security(Settings(kafka_security=security))
        assert expected in str(caught.value) and PASSWORD not in str(caught.value)
    with pytest.raises(ValidationError) as bad:
        KafkaSecurity(sasl_mechanism="GSSAPI", sasl_password=PASSWORD)
    line = describe_error(bad.value)
    assert line.startswith("SWITCHYARD_KAFKA_SASL_MECHANISM") and PASSWORD not in line


def test_the_secrets_do_not_show_in_the_settings(tmp_path: Path) -> None:
    settings = sasl(ssl_key_password=PASSWORD)
    assert PASSWORD not in repr(settings) + str(settings) + str(settings.model_dump())
    assert PASSWORD not in repr(settings.kafka_security)


def test_the_worker_refuses_a_half_configured_cluster_without_printing_the_secret() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "SWITCHYARD_TANSU_COMPAT": "1",  # no broker probe: the settings are checked first
        "SWITCHYARD_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "SWITCHYARD_KAFKA_SASL_PASSWORD": PASSWORD,
        "SWITCHYARD_PROVIDERS": str(ROOT / "providers.example.yaml"),
        "OPENAI_API_KEY": "sk-x",
        "ANTHROPIC_API_KEY": "sk-y",
    }
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "worker"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "SWITCHYARD_KAFKA_SASL_USERNAME is required" in done.stderr
    assert PASSWORD not in done.stdout + done.stderr
