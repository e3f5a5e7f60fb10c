"""Static checks: docker-compose shape, example config, event schemas up to date."""

from __future__ import annotations

from pathlib import Path

import yaml

from app import schemas
from app.config import load_config
from app.kafka import bootstrap_servers

ROOT = Path(__file__).resolve().parent.parent


def test_compose_runs_kafka_and_a_worker_pointing_at_it() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert "KAFKA_PROCESS_ROLES" in services["kafka"]["environment"]  # KRaft, no ZooKeeper
    worker_env = services["worker"]["environment"]
    host, port = bootstrap_servers(worker_env["SWITCHYARD_BROKER"]).split(":")
    assert host in services  # resolves to the kafka service
    assert port == "9092"
    assert "kafka" in services["worker"]["depends_on"]


def test_example_providers_file_loads_with_keys_from_the_environment() -> None:
    env = {"OPENAI_API_KEY": "sk-example-openai", "ANTHROPIC_API_KEY": "sk-example-anthropic"}
    config = load_config(ROOT / "providers.example.yaml", env=env)
    assert config.route_names() == ["chat"]
    assert "sk-example" not in repr(config) + str(config.routing_view())


def test_event_schemas_are_up_to_date() -> None:
    stale = schemas.write_or_check(check=True)
    assert stale == [], f"run `switchyard schemas` and commit: {stale}"
