"""Bring your own key: provider credentials of a tenant or a gateway key.

A credential is stored in the policy sealed (Fernet: AES-128-CBC with an HMAC-SHA256,
from the ``cryptography`` library) with the deployment's master key, which only the
workers hold (``SWITCHYARD_CREDENTIALS_KEY``): the policy topic, the providers file and
every record carry the sealed token and the credential's id, never the secret. The
executor opens it for the call it makes; a new policy version rotates it, no restart.

``switchyard credentials new-key`` prints a master key; ``switchyard credentials seal``
seals a secret read from standard input with the key in the environment.
"""

from app.credentials._seal import CredentialError, new_master_key, open_sealed, seal
from app.credentials._select import FALLBACK_ON, credential_for

__all__ = [
    "FALLBACK_ON",
    "CredentialError",
    "credential_for",
    "new_master_key",
    "open_sealed",
    "seal",
]
