"""Sealing and opening a secret with the master key (Fernet)."""

from __future__ import annotations

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken


class CredentialError(ValueError):
    """A credential that cannot be opened: no master key, a wrong one, a damaged token.
    Its message never holds the secret, the token or the key."""


def new_master_key() -> str:
    return Fernet.generate_key().decode("ascii")


def seal(secret: str, master_key: str) -> str:
    """The sealed token of ``secret`` (ASCII, safe in YAML)."""
    return _fernet(master_key).encrypt(secret.encode("utf-8")).decode("ascii")


def open_sealed(token: str, master_key: str | None) -> str:
    """The secret a token seals. Raises CredentialError."""
    if not master_key:
        raise CredentialError("no master key (SWITCHYARD_CREDENTIALS_KEY) to open it with")
    try:
        return _opened(token, master_key)
    except InvalidToken:
        raise CredentialError("the token does not open with this master key") from None


@lru_cache(maxsize=1024)
def _opened(token: str, master_key: str) -> str:
    return _fernet(master_key).decrypt(token.encode("ascii")).decode("utf-8")


def _fernet(master_key: str) -> Fernet:
    try:
        return Fernet(master_key.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        pass  # raised below, without the key in a chained exception
    raise CredentialError("the master key is not a Fernet key (32 url-safe base64 bytes)")
