"""Credentials tenants and gateway keys bring: sealing and opening with the master key,
which credential a call uses, and the config's checks."""

from __future__ import annotations

from typing import Any

import pytest

from app.config.schema import ConfigError, parse_config
from app.credentials import CredentialError, credential_for, new_master_key, open_sealed, seal

SECRET = "sk-canary-" + "c" * 24


def test_a_sealed_secret_opens_with_its_master_key_only() -> None:
    master = new_master_key()
    token = seal(SECRET, master)
    assert SECRET not in token and open_sealed(token, master) == SECRET
    for wrong in (new_master_key(), None, "not-a-key"):
        with pytest.raises(CredentialError) as refused:
            open_sealed(token, wrong)
        assert SECRET not in str(refused.value) and token not in str(refused.value)
        assert refused.value.__cause__ is None  # no chained error holding the key


def config(*credentials: dict[str, Any]) -> Any:
    return parse_config(
        {
            "providers": [
                {"id": "p", "base_url": "https://p.test/v1", "models": [{"name": "m"}]},
                {"id": "q", "base_url": "https://q.test/v1", "models": [{"name": "m"}]},
            ],
            "credentials": list(credentials),
        },
        env={},
    )


SEALED = "gAAAAA" + "x" * 40


def test_a_gateway_keys_credential_comes_before_its_tenants() -> None:
    found = config(
        {"id": "acme-p", "provider": "p", "tenant": "acme", "sealed": SEALED},
        {"id": "mobile-p", "provider": "p", "key": "mobile", "sealed": SEALED},
    )
    assert credential_for(found, "acme", "mobile", "p").id == "mobile-p"  # type: ignore[union-attr]
    assert credential_for(found, "acme", "other", "p").id == "acme-p"  # type: ignore[union-attr]
    assert credential_for(found, "acme", None, "q") is None
    assert credential_for(found, None, None, "p") is None


@pytest.mark.parametrize(
    ("credential", "error"),
    [
        ({"id": "x", "provider": "nope", "tenant": "a", "sealed": SEALED}, "unknown provider"),
        ({"id": "x", "provider": "p", "sealed": SEALED}, "a tenant or a key"),
        ({"id": "x", "provider": "p", "tenant": "a", "key": "k", "sealed": SEALED}, "one of them"),
    ],
)
def test_the_config_refuses_a_credential_without_one_owner_or_provider(
    credential: dict[str, Any], error: str
) -> None:
    with pytest.raises(ConfigError, match=error):
        config(credential)


def test_the_config_refuses_two_credentials_for_one_owner_and_provider() -> None:
    one = {"id": "a1", "provider": "p", "tenant": "acme", "sealed": SEALED}
    with pytest.raises(ConfigError, match="each id once"):
        config(one, one)
    with pytest.raises(ConfigError, match="same provider and owner"):
        config(one, {**one, "id": "a2"})
