"""Every environment variable the settings object reads is named in docs/operations.md.

The names are derived from the settings models themselves (``app/settings.py``):
a field's validation alias (or each of its alias choices) when it has one, else its
model's ``env_prefix`` and its name; a field whose type is itself a settings model
(``Topics``, ``KafkaSecurity``, ``RoutingParams``) contributes that model's names.
A setting added without a line in the reference fails here, and so does a topic
(``Topics``) that README.md or docs/operations.md does not name.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import AliasChoices, AliasPath
from pydantic_settings import BaseSettings

from app.routing.params import RoutingParams
from app.routing.params import env_names as routing_env_names
from app.settings import Settings, Topics

OPERATIONS = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
README = Path(__file__).resolve().parent.parent / "README.md"


def env_names(model: type[BaseSettings]) -> list[str]:
    """The environment variables ``model`` reads, nested settings models included."""
    prefix = str(model.model_config.get("env_prefix", ""))
    names: list[str] = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if kind is RoutingParams:  # values, read from the environment where a worker starts
            names.extend(routing_env_names().values())
            continue
        if isinstance(kind, type) and issubclass(kind, BaseSettings):
            names.extend(env_names(kind))
            continue
        alias = field.validation_alias
        if alias is None:
            names.append(f"{prefix}{name}".upper())
        elif isinstance(alias, str):
            names.append(alias.upper())
        elif isinstance(alias, AliasChoices):
            names.extend(c.upper() for c in alias.choices if isinstance(c, str))
        else:
            assert not isinstance(alias, AliasPath), f"{model.__name__}.{name}: alias path"
    return names


def test_the_derivation_sees_every_model() -> None:
    names = env_names(Settings)
    assert len(names) == len(set(names)), "two fields read the same variable"
    for expected in (
        "SWITCHYARD_BROKER",  # prefix + name
        "SWITCHYARD_PROVIDERS_FILE",  # an alias choice
        "SWITCHYARD_TOPIC_ROUTING",  # Topics
        "SWITCHYARD_KAFKA_SASL_PASSWORD",  # KafkaSecurity
        "CB_TIMEOUT_S",  # RoutingParams: the bandit algorithm's name, no prefix
        "SWITCHYARD_MAX_ATTEMPTS",  # RoutingParams: a prefixed alias
    ):
        assert expected in names, expected


def test_every_setting_is_in_operations_md() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    missing = [
        name
        for name in env_names(Settings)
        if not re.search(rf"(?<![A-Z0-9_]){re.escape(name)}(?![A-Z0-9_])", text)
    ]
    assert not missing, f"docs/operations.md does not name: {', '.join(missing)}"


def test_every_topic_is_in_the_readme_and_operations_md() -> None:
    """README's event contract and internal topics, and the topics table, name them all."""
    names = list(Topics().model_dump().values())
    for doc in (README, OPERATIONS):
        text = doc.read_text(encoding="utf-8")
        missing = [name for name in names if f"`{name}`" not in text]
        assert not missing, f"{doc.name} does not name: {', '.join(missing)}"
