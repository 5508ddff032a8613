"""Kafka transport security: TLS and SASL settings, and the one place that turns them
into aiokafka client arguments (every producer, consumer and admin client of
:class:`~esched.services.bus.kafka.KafkaBus` gets the same).

Secrets (the SASL password, the private key's password, an OAuth token) are never
part of a ``repr`` or of an error message.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.abc import AbstractTokenProvider
from aiokafka.helpers import create_ssl_context

__all__ = [
    "MECHANISMS",
    "PROTOCOLS",
    "FileTokenProvider",
    "KafkaSecurity",
    "KafkaSecurityError",
]

#: Kafka's ``security.protocol`` values.
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The SASL mechanisms esched configures (aiokafka's GSSAPI needs Kerberos libraries
#: and is not offered).
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class KafkaSecurityError(ValueError):
    """The security settings are inconsistent or their files cannot be used."""


class FileTokenProvider(AbstractTokenProvider):
    """OAUTHBEARER tokens read from a file at each (re)authentication, so whatever
    refreshes the token (a sidecar, a cron job, a Kubernetes projected token) only
    rewrites the file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"FileTokenProvider({self.path!r})"

    async def token(self) -> str:
        try:
            text = (await asyncio.to_thread(Path(self.path).read_text)).strip()
        except OSError as exc:
            raise KafkaSecurityError(f"OAuth token file {self.path}: {exc.strerror}") from None
        if not text:
            raise KafkaSecurityError(f"OAuth token file {self.path} is empty")
        return text


@dataclass(frozen=True)
class KafkaSecurity:
    """How clients authenticate to the brokers and protect the connection.

    ``protocol`` defaults from the rest: ``SASL_SSL`` with a SASL mechanism and TLS
    files, ``SASL_PLAINTEXT`` with a mechanism only, ``SSL`` with TLS files only,
    else ``PLAINTEXT``.
    """

    protocol: str | None = None
    #: CA bundle that signs the brokers' certificates (else the system's).
    ca_file: str | None = None
    #: Client certificate and key (mutual TLS).
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    #: Verify the broker's host name against its certificate (on by default).
    check_hostname: bool = True
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    #: OAUTHBEARER: a file holding the current access token.
    oauth_token_file: str | None = None

    @property
    def effective_protocol(self) -> str:
        """The security protocol after defaults."""
        if self.protocol:
            return self.protocol.upper()
        tls = bool(self.ca_file or self.cert_file)
        if self.sasl_mechanism:
            return "SASL_SSL" if tls else "SASL_PLAINTEXT"
        return "SSL" if tls else "PLAINTEXT"

    def validate(self) -> None:
        """Raise :class:`KafkaSecurityError` for settings that cannot work together."""
        proto = self.effective_protocol
        if proto not in PROTOCOLS:
            raise KafkaSecurityError(
                f"security protocol {self.protocol!r}: one of {', '.join(PROTOCOLS)}"
            )
        tls = proto in ("SSL", "SASL_SSL")
        sasl = proto in ("SASL_PLAINTEXT", "SASL_SSL")
        if not tls and (self.ca_file or self.cert_file or self.key_file):
            raise KafkaSecurityError(f"TLS files given but the security protocol is {proto}")
        if self.key_file and not self.cert_file:
            raise KafkaSecurityError("a client key needs its client certificate")
        mech = (self.sasl_mechanism or "").upper()
        if sasl and not mech:
            raise KafkaSecurityError(f"security protocol {proto} needs a SASL mechanism")
        if mech and not sasl:
            raise KafkaSecurityError(
                f"SASL mechanism {mech} given but the security protocol is {proto}"
            )
        if mech and mech not in MECHANISMS:
            raise KafkaSecurityError(f"SASL mechanism {mech!r}: one of {', '.join(MECHANISMS)}")
        if mech == "OAUTHBEARER":
            if not self.oauth_token_file:
                raise KafkaSecurityError("SASL OAUTHBEARER needs an OAuth token file")
        elif mech and not (self.sasl_username and self.sasl_password):
            raise KafkaSecurityError(f"SASL {mech} needs a user name and a password")

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context: the CA file (else the system's trust store), the client
        certificate and key when given, host names checked unless turned off."""
        for what, path in (
            ("CA file", self.ca_file),
            ("client certificate", self.cert_file),
            ("client key", self.key_file),
        ):
            if path and not Path(path).is_file():
                raise KafkaSecurityError(f"Kafka TLS {what} {path}: no such file")
        try:
            ctx = create_ssl_context(
                cafile=self.ca_file,
                certfile=self.cert_file,
                keyfile=self.key_file,
                password=self.key_password,
            )
        except (ssl.SSLError, OSError, ValueError) as exc:
            # The reason only (no password can be in it, but keep the message short).
            raise KafkaSecurityError(
                f"Kafka TLS files (CA {self.ca_file}, certificate {self.cert_file}, "
                f"key {self.key_file}): {getattr(exc, 'reason', None) or type(exc).__name__}"
            ) from None
        if not self.check_hostname:
            ctx.check_hostname = False
        return ctx

    def client_kwargs(self) -> dict[str, Any]:
        """The aiokafka client arguments (producer, consumer and admin alike)."""
        self.validate()
        proto = self.effective_protocol
        kwargs: dict[str, Any] = {"security_protocol": proto}
        if proto in ("SSL", "SASL_SSL"):
            kwargs["ssl_context"] = self.ssl_context()
        mech = (self.sasl_mechanism or "").upper()
        if mech:
            kwargs["sasl_mechanism"] = mech
            if mech == "OAUTHBEARER":
                assert self.oauth_token_file is not None  # validate()
                kwargs["sasl_oauth_token_provider"] = FileTokenProvider(self.oauth_token_file)
            else:
                kwargs["sasl_plain_username"] = self.sasl_username
                kwargs["sasl_plain_password"] = self.sasl_password
        return kwargs
