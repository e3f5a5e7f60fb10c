"""Which credential a call uses: the request's gateway key's for the provider, else its
tenant's; none, the deployment's own (managed) key."""

from __future__ import annotations

from typing import Final

from app.config.schema import Credential, RoutingConfig
from app.contract import StatusClass

#: Results of an own key after which ``fallback: managed`` calls again with the managed
#: key in the same attempt: the key was refused, or its own quota ran out.
FALLBACK_ON: Final = frozenset({StatusClass.AUTH_ERROR, StatusClass.RATE_LIMITED})


def credential_for(
    config: RoutingConfig, tenant: str | None, key_name: str | None, provider_id: str
) -> Credential | None:
    found = None
    for credential in config.credentials:
        if credential.provider != provider_id:
            continue
        if key_name is not None and credential.key == key_name:
            return credential
        if tenant is not None and credential.tenant == tenant:
            found = credential
    return found
