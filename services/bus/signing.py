"""Signed internal records: the one place proposals and work items are signed and checked.

The internal topics (``proposals``, ``work``) decide placements and evictions, so a
record on them must come from an esched service, not from any client that can reach
the broker. Their writers (replicas, the dispatcher's work and reclaim proposals)
add a header ``esched-sig: <key id>:<hex HMAC-SHA256 of the record value>``; their
readers (the commit service, the replicas) refuse a record without it (reason
``unsigned``) or whose MAC matches no known key (``bad_signature``) to the
dead-letter topic and commit its offset, so a forged record can neither act nor stall.

Keys: a :class:`Keyring` holds the current key (signs) and previous ones (still
accepted), so a key is rotated without downtime: add the new key as a previous one
everywhere, then make it current, then drop the old one. A signed record replayed
as is does nothing new: proposals are idempotent on their id, a work item names a
pod the dispatcher already made pending.

Without keys (:func:`load_keyring` returns None) records are sent unsigned and read
unchecked; the services say so once at start (:func:`warn_if_unsigned`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from esched.services.bus import _mac
from esched.services.bus._mac import Mac
from esched.services.bus.base import BusProducer, Headers, Message
from esched.services.bus.deadletter import Dead

__all__ = [
    "HEADER",
    "KEYS_ENV",
    "KEYS_FILE_ENV",
    "Keyring",
    "SigningConfigError",
    "SigningKey",
    "check",
    "load_keyring",
    "parse_keys",
    "send_signed",
    "split_signed",
    "warn_if_unsigned",
]

log = logging.getLogger(__name__)

#: The record header carrying the signature.
HEADER = "esched-sig"
#: Environment variables of the keys themselves / of a file holding them.
KEYS_ENV = "ESCHED_SIGNING_KEYS"
KEYS_FILE_ENV = "ESCHED_SIGNING_KEYS_FILE"
#: Shortest secret accepted (bytes): HMAC-SHA256's security needs a key of at least
#: its output size.
MIN_SECRET_BYTES = 32
#: Longest signature header value considered (key id, colon, 64 hex digits).
_MAX_HEADER_BYTES = 256


class SigningConfigError(ValueError):
    """The signing keys cannot be used (never includes a secret in its text)."""


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One HMAC key: its id (in each signature, so readers pick the key) and secret."""

    kid: str
    secret: bytes = field(repr=False)


class Keyring:
    """The current key (first: signs) and the previous ones (accepted while rotating)."""

    def __init__(self, keys: Sequence[SigningKey]) -> None:
        if not keys:
            raise SigningConfigError("a keyring needs at least one key")
        kids = [k.kid for k in keys]
        if len(set(kids)) != len(kids):
            raise SigningConfigError(f"signing key ids repeat: {kids}")
        self.current = keys[0]
        self._by_kid: dict[bytes, Mac] = {k.kid.encode(): Mac(k.secret) for k in keys}
        self._mac = self._by_kid[self.current.kid.encode()]
        self._prefix = self.current.kid.encode() + b":"

    @property
    def kids(self) -> tuple[str, ...]:
        """The key ids, current first."""
        return tuple(k.decode() for k in self._by_kid)

    def __repr__(self) -> str:
        return f"Keyring(kids={self.kids!r})"

    def signature(self, value: bytes) -> bytes:
        """The header value signing ``value`` with the current key."""
        return self._mac.signature(self._prefix, value)

    def sign(self, value: bytes) -> Headers:
        """The headers of a record with this value."""
        return ((HEADER, self.signature(value)),)

    def signed(
        self, records: Sequence[tuple[bytes | None, bytes]]
    ) -> list[tuple[bytes | None, bytes, Headers]]:
        """``(key, value)`` records with their signature headers."""
        return _mac.signed(self._mac, self._prefix, HEADER, list(records))

    def refusal(self, msg: Message) -> tuple[str, str] | None:
        """None when ``msg`` is signed by a known key, else ``(reason, explanation)``:
        ``unsigned`` (no signature header) or ``bad_signature``."""
        why = _mac.refusal(self._by_kid, HEADER, msg.headers, msg.value, _MAX_HEADER_BYTES)
        return None if why is None else _refusal_words(*why)

    def split(self, msgs: Sequence[Message]) -> tuple[list[Message], list[Dead]]:
        """The records of ``msgs`` signed by a known key, in order, and the dead
        letters of the others (:meth:`refusal`; field ``headers``)."""
        accepted, refused = _mac.split(self._by_kid, HEADER, msgs, _MAX_HEADER_BYTES)
        dead: list[Dead] = [
            (m, *_refusal_words(code, detail), "headers") for m, code, detail in refused
        ]
        return accepted, dead


def _refusal_words(code: int, detail: object) -> tuple[str, str]:
    """``(reason, explanation)`` of a refusal code of :func:`_mac.refusal`."""
    if code == _mac.UNSIGNED:
        return "unsigned", f"no {HEADER} header: not written by an esched service"
    if code == _mac.TWO_HEADERS:
        return "bad_signature", f"more than one {HEADER} header"
    if code == _mac.TOO_LONG:
        return "bad_signature", f"{HEADER} header of {detail} bytes"
    kid = cast(bytes, detail)
    if code == _mac.UNKNOWN_KEY:
        # The id is the sender's text: shown escaped and cut, never trusted.
        return "bad_signature", f"unknown signing key id {kid[:64]!r}"
    return "bad_signature", f"signature of key {kid.decode()} does not match the record"


def parse_keys(text: str, where: str) -> Keyring:
    """Keys from text: ``kid:secret`` entries, one per line or comma-separated, the
    current key first; blank lines and ``#`` comments skipped. A secret is its text's
    UTF-8 bytes (at least :data:`MIN_SECRET_BYTES`; e.g. ``openssl rand -hex 32``)."""
    keys: list[SigningKey] = []
    for n, raw in enumerate(text.replace(",", "\n").splitlines(), 1):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        kid, sep, secret = entry.partition(":")
        kid, secret = kid.strip(), secret.strip()
        if not sep or not kid or not secret:
            raise SigningConfigError(f"{where}: entry {n} is not kid:secret")
        if not kid.isascii() or not kid.isprintable() or " " in kid:
            raise SigningConfigError(f"{where}: key id of entry {n} must be printable ASCII")
        if len(secret.encode()) < MIN_SECRET_BYTES:
            raise SigningConfigError(
                f"{where}: the secret of key {kid} is shorter than {MIN_SECRET_BYTES} bytes"
            )
        keys.append(SigningKey(kid, secret.encode()))
    if not keys:
        raise SigningConfigError(f"{where}: no keys")
    return Keyring(keys)


def load_keyring(
    keys_file: str | None = None, environ: Mapping[str, str] | None = None
) -> Keyring | None:
    """The keyring from ``keys_file`` (flag or config file), else ``$ESCHED_SIGNING_KEYS_FILE``,
    else ``$ESCHED_SIGNING_KEYS``; None when none is set (unsigned)."""
    env = os.environ if environ is None else environ
    path = keys_file or env.get(KEYS_FILE_ENV)
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise SigningConfigError(f"signing keys file {path}: {exc.strerror}") from None
        return parse_keys(text, f"signing keys file {path}")
    inline = env.get(KEYS_ENV)
    if inline:
        return parse_keys(inline, KEYS_ENV)
    return None


def check(keyring: Keyring | None, msg: Message) -> tuple[str, str] | None:
    """Why ``msg`` is refused (``(reason, explanation)``), or None; every record is
    accepted when no keys are configured."""
    return None if keyring is None else keyring.refusal(msg)


def split_signed(
    keyring: Keyring | None, msgs: Sequence[Message]
) -> tuple[Sequence[Message], list[Dead]]:
    """The records of ``msgs`` to read (all of them without keys) and the dead letters
    of the refused (:meth:`Keyring.split`): the one refusal the commit service and
    replicas apply to a polled batch before reading a record of it."""
    return (msgs, []) if keyring is None else keyring.split(msgs)


async def send_signed(
    producer: BusProducer,
    keyring: Keyring | None,
    topic: str,
    records: Sequence[tuple[bytes | None, bytes]],
) -> None:
    """Send ``(key, value)`` records to an internal topic, signed when there are keys."""
    if keyring is None:
        await producer.send_many(topic, records)
    else:
        await producer.send_with_headers(topic, keyring.signed(records))


def warn_if_unsigned(keyring: Keyring | None, service: str) -> None:
    """One warning at start when a service on a shared broker runs without keys."""
    if keyring is None:
        log.warning(
            "%s: no signing keys (--signing-keys-file, %s or %s): internal records "
            "are neither signed nor checked, so any client of the broker can place "
            "and evict pods",
            service,
            KEYS_FILE_ENV,
            KEYS_ENV,
        )
