"""Static checks: docker-compose (services, images, settings, probes, Grafana), example config,
event schemas up to date."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app import schemas
from app.cli import build_parser
from app.embedded.kafka import KAFKA_VERSION
from app.kafka import bootstrap_servers
from app.policy.files import load_config
from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
WORKERS = ("worker-1", "worker-2")
#: Images docker-compose.yml may name: pinned tags published by their projects.
#: Kafka's is the release the tests run on.
KAFKA_IMAGE = f"apache/kafka:{KAFKA_VERSION}"
KNOWN_IMAGES = {KAFKA_IMAGE, "prom/prometheus:v2.53.2", "grafana/grafana:11.2.0"}


def setting_variables() -> set[str]:
    """Every ``SWITCHYARD_*`` variable the settings read."""
    names = set()
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        choices = getattr(alias, "choices", [alias] if isinstance(alias, str) else [])
        names.update(str(choice) for choice in choices)
        names.add(f"SWITCHYARD_{field_name.upper()}")
    nested_models = (("topics", "SWITCHYARD_TOPIC_"), ("kafka_security", "SWITCHYARD_KAFKA_"))
    for nested, prefix in nested_models:
        model = Settings.model_fields[nested].annotation
        assert model is not None
        names.update(f"{prefix}{name.upper()}" for name in model.model_fields)
    return names


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def test_compose_runs_kafka_two_workers_and_a_gateway_pointing_at_it() -> None:
    services = compose()["services"]
    assert "KAFKA_PROCESS_ROLES" in services["kafka"]["environment"]  # KRaft, no ZooKeeper
    for name in (*WORKERS, "gateway"):
        service = services[name]
        host, port = bootstrap_servers(service["environment"]["SWITCHYARD_BROKER"]).split(":")
        assert host in services  # resolves to the kafka service
        assert port == "9092"
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert [services[w]["command"] for w in WORKERS] == [["switchyard", "worker"]] * 2
    assert services["gateway"]["command"] == ["switchyard", "gateway"]


def test_compose_names_only_real_images_commands_and_settings() -> None:
    """Pinned images known to exist, ``switchyard`` subcommands the CLI has, and every
    ``SWITCHYARD_*`` variable a setting of app/settings.py (a typo would be ignored)."""
    services = compose()["services"]
    images = {name: service["image"] for name, service in services.items()}
    ours = {name for name, image in images.items() if image == "switchyard:local"}
    assert ours == {*WORKERS, "gateway"}
    assert {image for image in images.values() if image != "switchyard:local"} <= KNOWN_IMAGES
    assert images["kafka"] == KAFKA_IMAGE
    dockerfile = (ROOT / services["gateway"]["build"]["dockerfile"]).read_text()
    assert re.findall(r"^FROM (\S+)", dockerfile, flags=re.M) == ["python:3.11-slim"]
    subcommands = {
        name
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }
    for name in ours:
        assert services[name]["command"][1] in subcommands
        for variable in services[name]["environment"]:
            if variable.startswith("SWITCHYARD_"):
                assert variable in setting_variables(), f"{name}: {variable} is no setting"
    for service in services.values():  # published on loopback only
        assert all(str(port).startswith("127.0.0.1:") for port in service.get("ports", []))


def test_compose_health_checks_use_the_probes_and_mounts_exist() -> None:
    services = compose()["services"]
    port = Settings.model_fields["web_port"].default
    for name in WORKERS:
        assert f"127.0.0.1:{port}/readyz" in " ".join(services[name]["healthcheck"]["test"])
        assert "SWITCHYARD_WEB_PORT" not in services[name]["environment"]
    assert "/readyz" in " ".join(services["gateway"]["healthcheck"]["test"])
    assert services["gateway"]["environment"]["SWITCHYARD_GATEWAY_PORT"] == 8080
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), source
    scrape = yaml.safe_load((ROOT / "ops/prometheus/prometheus.yml").read_text())
    (job,) = scrape["scrape_configs"]
    targets = [t for static in job["static_configs"] for t in static["targets"]]
    assert targets == [f"{name}:{port}" for name in WORKERS]  # every worker, at its web port


def test_grafana_provisioning_points_at_the_dashboard_and_the_datasource() -> None:
    services = compose()["services"]
    mounts = dict(v.split(":")[:2] for v in services["grafana"]["volumes"] if v.startswith("./"))
    provisioning = ROOT / "ops/grafana/provisioning"
    provider = yaml.safe_load((provisioning / "dashboards/switchyard.yml").read_text())
    dashboards_dir = provider["providers"][0]["options"]["path"]
    assert mounts["./ops/grafana/dashboards"] == dashboards_dir
    datasource = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())
    (source,) = datasource["datasources"]
    assert source["url"] == "http://prometheus:9090" and "prometheus" in services
    dashboard = json.loads((ROOT / "ops/grafana/dashboards/switchyard.json").read_text())
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == source["uid"]
        assert all(t["datasource"]["uid"] == source["uid"] for t in panel["targets"])


def test_docker_compose_validates_the_file() -> None:
    """docker-compose 1.29 (Debian's, installed by .ci/run) checks every key against the
    Compose schema without a Docker daemon."""
    tool = shutil.which("docker-compose")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose is not installed (.ci/run installs it)")
        pytest.skip("docker-compose is not installed")
    done = subprocess.run(
        [tool, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_example_providers_file_loads_with_keys_from_the_environment() -> None:
    env = {"OPENAI_API_KEY": "sk-example-openai", "ANTHROPIC_API_KEY": "sk-example-anthropic"}
    config = load_config(ROOT / "providers.example.yaml", env=env)
    assert config.route_names() == ["chat"]
    assert "sk-example" not in repr(config) + str(config.routing_view())


def test_event_schemas_are_up_to_date() -> None:
    stale = schemas.write_or_check(check=True)
    assert stale == [], f"run `switchyard schemas` and commit: {stale}"
