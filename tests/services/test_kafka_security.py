"""Kafka TLS and SASL (issue 19, part 2): the aiokafka client arguments of each mode,
TLS contexts from real certificate files, the CLI's flags, environment and config
file, secrets never shown, and a real TLS handshake (mutual TLS) with a broker.

tansu (the test broker) has no TLS listener and no SASL, so the handshake test puts a
TLS-terminating proxy in front of it (the broker advertises the proxy's address, so
every connection of the clients goes through TLS). SASL is tested up to the client
arguments only: no SASL-capable broker runs here.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator

import pytest
from click.testing import CliRunner

from esched.services.bus import open_bus
from esched.services.bus.security import (
    FileTokenProvider,
    KafkaSecurity,
    KafkaSecurityError,
)
from esched.services.bus.signing import Keyring, SigningKey
from esched.services.cli import EXIT_USAGE, cli
from esched.services.devbroker import DevBroker, free_port
from support.aio import eventually
from support.certs import Pki, make_pki

PASSWORD = "sasl-pass-word-5e1f"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


# ---------------------------------------------------------------------- client arguments


def test_without_settings_clients_connect_in_plaintext():
    assert KafkaSecurity().client_kwargs() == {"security_protocol": "PLAINTEXT"}


def test_tls_with_a_ca_file_checks_the_broker_against_that_ca(pki):
    kwargs = KafkaSecurity(ca_file=str(pki.ca)).client_kwargs()
    assert set(kwargs) == {"security_protocol", "ssl_context"}
    assert kwargs["security_protocol"] == "SSL"
    ctx = kwargs["ssl_context"]
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert [dict(x[0] for x in c["subject"]) for c in ctx.get_ca_certs()] == [
        {"commonName": "test CA"}
    ]


def test_mutual_tls_loads_the_client_certificate_and_an_encrypted_key(pki):
    kwargs = KafkaSecurity(
        ca_file=str(pki.ca),
        cert_file=str(pki.client_cert),
        key_file=str(pki.client_key_encrypted),
        key_password=pki.key_password,
        check_hostname=False,
    ).client_kwargs()
    assert kwargs["security_protocol"] == "SSL"
    assert not kwargs["ssl_context"].check_hostname


def test_a_wrong_key_password_is_an_error_that_does_not_show_it(pki):
    security = KafkaSecurity(
        ca_file=str(pki.ca),
        cert_file=str(pki.client_cert),
        key_file=str(pki.client_key_encrypted),
        key_password="not-the-password-9c2",
    )
    with pytest.raises(KafkaSecurityError, match=r"client-enc\.key") as err:
        security.client_kwargs()
    assert "not-the-password-9c2" not in str(err.value)
    assert "not-the-password-9c2" not in repr(security)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_with_a_password_over_plaintext(mechanism):
    kwargs = KafkaSecurity(
        sasl_mechanism=mechanism.lower(), sasl_username="esched", sasl_password=PASSWORD
    ).client_kwargs()
    assert kwargs == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "esched",
        "sasl_plain_password": PASSWORD,
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_with_a_password_over_tls(pki, mechanism):
    kwargs = KafkaSecurity(
        ca_file=str(pki.ca),
        sasl_mechanism=mechanism,
        sasl_username="esched",
        sasl_password=PASSWORD,
    ).client_kwargs()
    assert isinstance(kwargs.pop("ssl_context"), ssl.SSLContext)
    assert kwargs == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "esched",
        "sasl_plain_password": PASSWORD,
    }


async def test_oauthbearer_reads_the_current_token_from_its_file(tmp_path):
    token = tmp_path / "token"
    token.write_text("eyJ.first\n")
    kwargs = KafkaSecurity(
        protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER", oauth_token_file=str(token)
    ).client_kwargs()
    provider = kwargs.pop("sasl_oauth_token_provider")
    assert kwargs == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER"}
    assert isinstance(provider, FileTokenProvider)
    assert await provider.token() == "eyJ.first"
    token.write_text("eyJ.refreshed")  # a refresher rewrote it
    assert await provider.token() == "eyJ.refreshed"
    token.write_text("")
    with pytest.raises(KafkaSecurityError, match="is empty"):
        await provider.token()


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"protocol": "SASL_SSL"}, "needs a SASL mechanism"),
        ({"protocol": "SSL", "sasl_mechanism": "PLAIN"}, "but the security protocol is SSL"),
        ({"protocol": "PLAINTEXT", "ca_file": "ca.pem"}, "TLS files given"),
        ({"sasl_mechanism": "PLAIN", "sasl_username": "u"}, "needs a user name and a password"),
        ({"sasl_mechanism": "SCRAM-SHA-512", "sasl_password": "pw"}, "user name"),
        ({"sasl_mechanism": "GSSAPI"}, "one of PLAIN"),
        ({"protocol": "TLS"}, "one of PLAINTEXT"),
        ({"sasl_mechanism": "OAUTHBEARER"}, "needs an OAuth token file"),
        ({"key_file": "k.pem", "ca_file": "ca.pem"}, "needs its client certificate"),
        ({"ca_file": "/nonexistent/ca.pem"}, "CA file /nonexistent/ca.pem: no such file"),
    ],
)
def test_settings_that_cannot_work_are_refused_with_a_reason(settings, words):
    with pytest.raises(KafkaSecurityError, match=words):
        KafkaSecurity(**settings).client_kwargs()


def test_the_bus_checks_its_settings_when_it_is_opened():
    with pytest.raises(KafkaSecurityError, match="needs a user name"):
        open_bus("127.0.0.1:9", security=KafkaSecurity(sasl_mechanism="PLAIN"))


def test_settings_show_no_secret():
    shown = repr(
        KafkaSecurity(
            sasl_mechanism="PLAIN", sasl_username="u", sasl_password=PASSWORD, key_password="kp12"
        )
    )
    assert PASSWORD not in shown and "kp12" not in shown and "'u'" in shown


# ---------------------------------------------------------------------- the CLI


def _invoke(args: list[str], env: dict[str, str] | None = None):
    base: dict[str, str | None] = {
        k: None for k in ("ESCHED_KAFKA_SASL_PASSWORD", "ESCHED_SIGNING_KEYS")
    }
    return CliRunner().invoke(cli, args, env={**base, **(env or {})})


def test_publish_takes_sasl_from_flags_and_its_password_from_the_environment_only(tmp_path):
    events = tmp_path / "e.jsonl"
    events.write_text("")
    args = ["publish", str(events), "--kafka", "127.0.0.1:9", "--kafka-sasl-mechanism", "PLAIN"]
    missing = _invoke([*args, "--kafka-sasl-username", "esched"])
    assert missing.exit_code == EXIT_USAGE
    assert "needs a user name and a password" in missing.output
    bad_ca = _invoke(
        [*args, "--kafka-sasl-username", "esched", "--kafka-ca-file", str(tmp_path / "no.pem")],
        env={"ESCHED_KAFKA_SASL_PASSWORD": PASSWORD},
    )
    assert bad_ca.exit_code == EXIT_USAGE and "no.pem: no such file" in bad_ca.output
    assert PASSWORD not in bad_ca.output
    helped = _invoke(["publish", "--help"], env={"ESCHED_KAFKA_SASL_PASSWORD": PASSWORD})
    assert helped.exit_code == 0 and "--kafka-sasl-mechanism" in helped.output
    assert PASSWORD not in helped.output
    assert "--kafka-sasl-password " not in helped.output  # no flag for the secret itself


def test_the_config_file_sets_kafka_security_for_every_service(tmp_path):
    config = tmp_path / "esched.yaml"
    config.write_text(
        "kafka: 127.0.0.1:9\n"
        "kafka_security_protocol: SASL_SSL\n"
        f"kafka_ca_file: {tmp_path / 'missing-ca.pem'}\n"
        "kafka_sasl_mechanism: SCRAM-SHA-512\n"
        "kafka_sasl_username: esched\n"
        f"kafka_sasl_password_file: {tmp_path / 'pw'}\n"
    )
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    for command in ("commit", "dispatch", "ingest"):
        result = _invoke(["--config", str(config), command])
        assert result.exit_code == EXIT_USAGE, (command, result.output)
        assert "missing-ca.pem: no such file" in result.output
        assert PASSWORD not in result.output


def test_bad_signing_keys_stop_a_service_at_start_without_showing_them(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("k1:too-short\n")
    result = _invoke(["commit", "--kafka", "127.0.0.1:9", "--signing-keys-file", str(keys)])
    assert result.exit_code == EXIT_USAGE
    assert "shorter than 32 bytes" in result.output and "too-short" not in result.output
    inline = _invoke(
        ["replica", "--id", "r1", "--kafka", "127.0.0.1:9"],
        {"ESCHED_SIGNING_KEYS": "no-colon-here-but-a-long-secret-0123456789"},
    )
    assert inline.exit_code == EXIT_USAGE and "not kid:secret" in inline.output
    assert "no-colon-here" not in inline.output


# ---------------------------------------------------------------------- a TLS handshake


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


@contextlib.asynccontextmanager
async def _tls_proxy(
    pki: Pki, port: int, upstream: int, handshakes: list[str]
) -> AsyncIterator[None]:
    """TLS on ``port`` (client certificates required, from the test CA), plaintext to
    the broker on ``upstream``; records each client certificate's common name."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    ctx.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    ctx.verify_mode = ssl.CERT_REQUIRED

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert") or {}
        handshakes.append(dict(x[0] for x in peer.get("subject", ())).get("commonName", ""))
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", port, ssl=ctx)
    try:
        yield
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)


@pytest.mark.kafka
async def test_services_talk_to_a_broker_over_mutual_tls_with_signed_records(
    pki: Pki, topic_prefix: str
):
    proxy_port = free_port()
    handshakes: list[str] = []
    with DevBroker(advertised=f"127.0.0.1:{proxy_port}").running() as broker:
        async with _tls_proxy(pki, proxy_port, broker.port, handshakes):
            security = KafkaSecurity(
                ca_file=str(pki.ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key)
            )
            keyring = Keyring([SigningKey("k1", b"k" * 32)])
            bus = open_bus(
                f"127.0.0.1:{proxy_port}", topic_prefix, security=security, keyring=keyring
            )
            await bus.ensure_topics(1)
            producer = bus.producer()
            await producer.start()
            consumer = bus.consumer([bus.topics.work], "tls-check")
            await consumer.start()
            try:
                # 40 records: the batch path (a record batch per partition) with headers.
                values = [b"item-%d" % i for i in range(40)]
                await producer.send_with_headers(
                    bus.topics.work, keyring.signed([(None, v) for v in values])
                )
                got: list = []

                async def polled() -> bool:
                    got.extend(await consumer.poll(500, 100))
                    return len(got) >= len(values)

                await eventually(polled, within=30)
            finally:
                await consumer.stop()
                await producer.stop()
    assert sorted(m.value for m in got) == sorted(values)
    assert all(keyring.refusal(m) is None for m in got)
    assert handshakes and set(handshakes) == {"esched"}


@pytest.mark.kafka
async def test_a_client_that_does_not_trust_the_broker_certificate_fails_the_handshake(
    pki: Pki,
):
    proxy_port = free_port()
    handshakes: list[str] = []
    with DevBroker(advertised=f"127.0.0.1:{proxy_port}").running() as broker:
        async with _tls_proxy(pki, proxy_port, broker.port, handshakes):
            ctx = KafkaSecurity(ca_file=str(pki.other_ca)).ssl_context()
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection(
                    "127.0.0.1", proxy_port, ssl=ctx, server_hostname="127.0.0.1"
                )
    assert handshakes == []


def test_up_with_a_key_that_does_not_open_is_a_usage_error(pki):
    result = _invoke(
        ["up", "--kafka", "127.0.0.1:9", "--kafka-ca-file", str(pki.ca),
         "--kafka-cert-file", str(pki.client_cert),
         "--kafka-key-file", str(pki.client_key_encrypted)],
        env={"ESCHED_KAFKA_KEY_PASSWORD": "not-it-4411"},
    )  # fmt: skip
    assert result.exit_code == EXIT_USAGE, result.output
    assert "client-enc.key" in result.output and "not-it-4411" not in result.output
