"""How every Kafka client of the project authenticates: SASL and TLS settings.

A nested part of the one settings object (``Settings.kafka_security``), read from the
environment with the prefix ``SWITCHYARD_KAFKA_``. ``app.kafka.client_security`` turns it
into aiokafka arguments, ``app.kafka.faust_security`` into Faust's ``broker_credentials``;
every client the project builds takes one of them (``tests/test_kafka_security.py``).

Secrets (the SASL password, the client key's password) are ``SecretStr``: the settings'
``repr`` shows ``**********`` and no error message names their value.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class SecurityProtocol(StrEnum):
    """Kafka's ``security.protocol``."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)


class SaslMechanism(StrEnum):
    """Kafka's ``sasl.mechanism`` values aiokafka and Faust both speak with a password."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


class KafkaSecurity(BaseSettings):
    """``SWITCHYARD_KAFKA_*``: how to reach a secured Kafka cluster (default: plaintext)."""

    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_KAFKA_", frozen=True)

    #: ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL`` (managed Kafka).
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism = SaslMechanism.PLAIN
    sasl_username: str | None = None
    #: Never logged, printed or counted.
    sasl_password: SecretStr | None = None
    #: CA bundle that signed the brokers' certificates (unset: the system's CAs).
    ssl_cafile: Path | None = None
    #: Client certificate and its key (mutual TLS), both or neither.
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    #: Password of an encrypted client key.
    ssl_key_password: SecretStr | None = None
    #: Check that the broker's certificate names the host connected to.
    ssl_check_hostname: bool = Field(default=True)

    def problems(self) -> list[str]:
        """What is inconsistent, naming variables only (never a value)."""
        found: list[str] = []
        protocol = self.security_protocol
        if protocol.uses_sasl and not self.sasl_username:
            found.append(f"SWITCHYARD_KAFKA_SASL_USERNAME is required with {protocol.value}")
        password = self.sasl_password.get_secret_value() if self.sasl_password else ""
        if protocol.uses_sasl and not password:
            found.append(f"SWITCHYARD_KAFKA_SASL_PASSWORD is required with {protocol.value}")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            found.append("SWITCHYARD_KAFKA_SSL_CERTFILE and _SSL_KEYFILE go together")
        tls_set = [
            name
            for name, value in (
                ("SSL_CAFILE", self.ssl_cafile),
                ("SSL_CERTFILE", self.ssl_certfile),
                ("SSL_KEYFILE", self.ssl_keyfile),
            )
            if value is not None
        ]
        if tls_set and not protocol.uses_tls:
            names = ", ".join(f"SWITCHYARD_KAFKA_{name}" for name in tls_set)
            found.append(f"{names} need SWITCHYARD_KAFKA_SECURITY_PROTOCOL=SSL or SASL_SSL")
        for name, path in (
            ("SSL_CAFILE", self.ssl_cafile),
            ("SSL_CERTFILE", self.ssl_certfile),
            ("SSL_KEYFILE", self.ssl_keyfile),
        ):
            if path is not None and not path.is_file():
                found.append(f"SWITCHYARD_KAFKA_{name}: {path} is not a readable file")
        return found
