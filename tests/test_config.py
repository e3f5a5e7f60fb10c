"""providers.yaml: ${ENV} interpolation, secrets kept out of everything, validation, routes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from factories import SECRET, params, provider

from app.config.providers import deployment_id
from app.config.schema import ConfigError, RoutingConfig, parse_config
from app.policy.files import load_config
from app.routing.policy import Policy

OTHER_SECRET = "fake-other-SECRET-fedcba9876543210"


def provider_data(pid: str = "openai-main", **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": pid,
        "base_url": "https://api.example.test/v1",
        "api_key": "${TEST_API_KEY}",
        "models": [{"name": "gpt-4o-mini"}],
    }
    data.update(fields)
    return data


def config_data(*providers: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"providers": list(providers) or [provider_data()], **top}


ENV = {"TEST_API_KEY": SECRET}


def error_of(data: Any, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, env=ENV if env is None else env)
    return str(info.value)


# --------------------------------------------------------------------------- interpolation


def test_env_interpolation() -> None:
    data = config_data(
        provider_data(base_url="https://${HOST}:${PORT}/v1", api_key="${TEST_API_KEY}")
    )
    config = parse_config(data, env={**ENV, "HOST": "llm.internal", "PORT": "8443"})
    p = config.providers[0]
    assert p.base_url == "https://llm.internal:8443/v1"
    assert p.api_key.get_secret_value() == SECRET


def test_a_file_reads_the_process_environment_and_the_schema_does_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TEST_API_KEY", OTHER_SECRET)
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump(config_data()), encoding="utf-8")
    assert load_config(path).providers[0].api_key.get_secret_value() == OTHER_SECRET
    with pytest.raises(ConfigError, match="TEST_API_KEY is not set"):
        parse_config(config_data())  # no environment but the one it is given


def test_text_without_reference_is_kept_verbatim() -> None:
    config = parse_config(config_data(provider_data(api_key="sk-$literal{not-a-ref")), env={})
    assert config.providers[0].api_key.get_secret_value() == "sk-$literal{not-a-ref"


def test_missing_env_var_names_field_path_and_variable() -> None:
    data = config_data(provider_data("a"), provider_data("b", api_key="${MISSING_KEY_B}"))
    message = error_of(data)
    assert "providers[1].api_key" in message
    assert "MISSING_KEY_B" in message
    assert SECRET not in message


def test_missing_env_var_nested_path() -> None:
    data = config_data(provider_data(models=[{"name": "m"}, {"name": "${MODEL_NAME}"}]))
    message = error_of(data)
    assert "providers[0].models[1].name" in message
    assert "MODEL_NAME" in message


def test_missing_env_var_through_load_config(tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump(config_data(provider_data(api_key="${NOT_SET_ANYWHERE}"))))
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert str(path) in message
    assert "providers[0].api_key" in message
    assert "NOT_SET_ANYWHERE" in message


def test_load_config_reads_yaml(tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(
        "providers:\n"
        "  - id: groq-fast\n"
        "    base_url: https://api.groq.test/v1\n"
        "    api_key: ${TEST_API_KEY}\n"
        "    timeout_ms: 8000\n"
        "    models:\n"
        "      - name: llama-3.1-8b\n"
        "      - name: llama-math\n"
        "        specialized: math\n"
    )
    config = load_config(path, env=ENV)
    p = config.providers[0]
    assert p.id == "groq-fast"
    assert p.timeout_ms == 8000
    assert p.default_model == "llama-3.1-8b"
    assert p.bonus_cost_per_mtok == 0.30
    assert p.api_key.get_secret_value() == SECRET


def test_load_config_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read providers file"):
        load_config(tmp_path / "nope.yaml", env=ENV)
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"providers: [\n  api_key: {SECRET}\n  : : :\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad, env=ENV)
    assert "not valid YAML" in str(info.value)
    assert SECRET not in str(info.value)


# --------------------------------------------------------------------------- secrets


def _with_secret_everywhere() -> RoutingConfig:
    return parse_config(config_data(provider_data("openai-a"), provider_data("groq-b")), env=ENV)


def test_api_key_not_in_repr_str_or_dumps() -> None:
    config = _with_secret_everywhere()
    assert config.providers[0].api_key.get_secret_value() == SECRET
    assert SECRET not in repr(config)
    assert SECRET not in str(config)
    assert SECRET not in repr(config.providers[0])
    assert SECRET not in config.model_dump_json()
    assert SECRET not in json.dumps(config.model_dump(mode="json"))


def test_api_key_not_in_routing_view_or_hash_input() -> None:
    config = _with_secret_everywhere()
    view = config.routing_view()
    assert all("api_key" not in p for p in view["providers"])
    canonical = json.dumps(view, sort_keys=True)
    assert SECRET not in canonical
    pol = Policy(config, params())
    assert SECRET not in json.dumps(
        {"config": config.routing_view(), "params": pol.params.model_dump(mode="json")}
    )
    # The hash does not depend on the key at all.
    rotated = parse_config(
        config_data(provider_data("openai-a"), provider_data("groq-b")),
        env={"TEST_API_KEY": OTHER_SECRET},
    )
    assert rotated.config_hash == config.config_hash
    assert Policy(rotated, params()).config_hash == pol.config_hash
    # ...but it does depend on what routes a request.
    cheaper = parse_config(
        config_data(provider_data("openai-a", cost_per_mtok=0.1), provider_data("groq-b")),
        env=ENV,
    )
    assert cheaper.config_hash != config.config_hash
    assert Policy(cheaper, params()).config_hash != pol.config_hash


@pytest.mark.parametrize(
    "broken",
    [
        {"base_url": "ftp://api.example.test"},
        {"max_concurrency": 0},
        {"timeout_ms": -1},
        {"apikey": SECRET},  # misspelt field
        {"models": SECRET},
        {"id": SECRET + " with spaces"},
    ],
)
def test_api_key_never_in_validation_errors(broken: dict[str, Any]) -> None:
    message = error_of(config_data(provider_data(**broken)))
    assert SECRET not in message
    assert message.startswith("providers.0.")


def test_api_key_not_in_reference_errors() -> None:
    duplicate = error_of(config_data(provider_data("a"), provider_data("a")))
    unknown = error_of(config_data(provider_data("a"), routes={"chat": {"providers": ["b"]}}))
    for message in (duplicate, unknown):
        assert SECRET not in message


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "base_url", ["api.example.test/v1", "ftp://api.example.test", "", "${TEST_API_KEY}"]
)
def test_bad_base_url(base_url: str) -> None:
    message = error_of(config_data(provider_data(base_url=base_url)))
    assert "providers.0.base_url" in message
    assert "http" in message  # the expected scheme is named
    assert SECRET not in message


@pytest.mark.parametrize("base_url", ["https://", "http:// api.example.test"])
def test_base_url_needs_a_host(base_url: str) -> None:
    message = error_of(config_data(provider_data(base_url=base_url)))
    assert "providers.0.base_url" in message


def test_duplicate_ids() -> None:
    message = error_of(config_data(provider_data("a"), provider_data("b"), provider_data("a")))
    assert "duplicate provider ids: a" in message


def test_unknown_route_provider() -> None:
    data = config_data(
        provider_data("a"),
        provider_data("b"),
        routes={"chat": {"providers": ["a"]}, "fast": {"providers": ["b", "zzz"]}},
    )
    message = error_of(data)
    assert "routes.fast.providers" in message
    assert "zzz" in message


def test_default_route_must_exist() -> None:
    data = config_data(provider_data("a"), routes={"fast": {"providers": ["a"]}})
    assert "default_route 'chat' is not a route" in error_of(data)
    ok = parse_config({**data, "default_route": "fast"}, env=ENV)
    assert ok.default_route == "fast"


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([], "must be a mapping"),
        ("providers: []", "must be a mapping"),
        ({}, "providers: Field required"),
        ({"providers": []}, "providers: List should have at least 1 item"),
        ({"providers": [provider_data(models=[])]}, "providers.0.models"),
        ({"providers": [provider_data(id="a:b")]}, "providers.0.id"),
        ({"providers": [provider_data(cost_per_mtok=-1)]}, "providers.0.cost_per_mtok"),
        (
            {"providers": [provider_data("a")], "routes": {"chat": {"providers": []}}},
            "routes.chat.providers",
        ),
        (
            {
                "providers": [provider_data("a")],
                "routes": {"chat": {"providers": ["a"], "max_attempts": 11}},
            },
            "routes.chat.max_attempts",
        ),
        ({"providers": [provider_data()], "bogus": 1}, "bogus"),
    ],
)
def test_invalid_configs(data: Any, fragment: str) -> None:
    assert fragment in error_of(data)


# --------------------------------------------------------------------------- routes


def _routed() -> RoutingConfig:
    return parse_config(
        config_data(
            provider_data("a"),
            provider_data("b"),
            provider_data("c"),
            routes={"chat": {"providers": ["c", "a"]}, "fast": {"providers": ["b"]}},
        ),
        env=ENV,
    )


def test_resolve_route_with_routes() -> None:
    config = _routed()
    assert config.resolve_route(None) == "chat"
    assert config.resolve_route("chat") == "chat"
    assert config.resolve_route("fast") == "fast"
    assert config.resolve_route("gpt-4o") is None
    assert config.resolve_route("a") is None  # a provider id is not a route
    assert config.route_names() == ["chat", "fast"]


def test_resolve_route_with_custom_default() -> None:
    data = config_data(provider_data("a"), routes={"fast": {"providers": ["a"]}})
    config = parse_config({**data, "default_route": "fast"}, env=ENV)
    assert config.resolve_route(None) == "fast"
    assert config.resolve_route("chat") is None


def test_resolve_route_without_routes() -> None:
    config = parse_config(config_data(provider_data("a"), provider_data("b")), env=ENV)
    assert config.route_names() == ["chat"]
    assert config.resolve_route(None) == "chat"
    assert config.resolve_route("chat") == "chat"
    assert config.resolve_route("unknown") is None
    assert [p.id for p in config.route_providers("chat")] == ["a", "b"]


def test_route_providers_keep_route_order() -> None:
    config = _routed()
    assert [p.id for p in config.route_providers("chat")] == ["c", "a"]
    assert [p.id for p in config.route_providers("fast")] == ["b"]
    with pytest.raises(KeyError):
        config.route_providers("nope")
    pol = Policy(config, params())
    assert [a.deployment for a in pol.arms("chat")] == ["c:gpt-4o-mini", "a:gpt-4o-mini"]


def test_default_model_skips_specialized() -> None:
    p = provider(
        "mistral-x",
        models=[{"name": "codestral", "specialized": "coding"}, {"name": "mistral-large"}],
    )
    assert p.default_model == "mistral-large"
    only_special = provider("mistral-y", models=[{"name": "codestral", "specialized": "coding"}])
    assert only_special.default_model == "codestral"
    assert deployment_id("mistral-x", "mistral-large") == "mistral-x:mistral-large"


def test_max_attempts_route_override() -> None:
    data = config_data(
        provider_data("a"),
        routes={"chat": {"providers": ["a"], "max_attempts": 2}, "fast": {"providers": ["a"]}},
    )
    pol = Policy(parse_config(data, env=ENV), params(max_attempts=4))
    assert pol.max_attempts("chat") == 2
    assert pol.max_attempts("fast") == 4


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("providers: [\n  a: 1\n  : : :\n", "line 3, column 3"),
        ("providers:\n  - id: a\n   base_url: x\n", "line 3, column 4"),
        ("providers:\n\t- id: a\n", "line 2, column 1"),
    ],
)
def test_a_yaml_syntax_error_names_line_and_column(tmp_path: Path, text: str, where: str) -> None:
    bad = tmp_path / "providers.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(bad, env=ENV)
    message = str(info.value)
    assert message.startswith(f"{bad} is not valid YAML at {where}: "), message
    assert "\n" not in message


def test_a_yaml_error_quotes_no_secret(tmp_path: Path) -> None:
    bad = tmp_path / "providers.yaml"
    bad.write_text(f"providers:\n  - api_key: *{SECRET}\n")  # an alias that does not exist
    with pytest.raises(ConfigError) as info:
        load_config(bad, env=ENV)
    assert "line 2, column 14" in str(info.value)
    assert SECRET not in str(info.value)


def test_a_providers_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "providers.yaml"
    bad.write_bytes(b"providers: \xff\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(bad, env=ENV)
