"""PostgreSQL over TLS (issue 19, part 2): the store URL's ``sslmode``, ``sslrootcert``,
``sslcert``, ``sslkey`` and ``sslpassword`` reach the driver (asyncpg), for the event
store and the leases alike, and no password shows in an error.

A PostgreSQL server of this module's own (``initdb`` of the installed PostgreSQL, run
as the ``postgres`` user) with ``ssl = on``, a server certificate from a test CA,
and ``pg_hba.conf`` accepting only TLS: role ``esched`` by client certificate
(``cert``: the certificate's common name is the role), ``postgres`` with TLS only.
Skipped where the PostgreSQL server binaries or the ``postgres`` user are missing.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from esched.services.devbroker import free_port
from esched.services.lease import open_lease
from esched.services.store import StoreError, open_store
from support.certs import Pki, make_pki
from support.events import append_events, node, pod

pytestmark = pytest.mark.postgres


def _pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return str(Path(found[-1]).parent) if found else None


class TlsPostgres:
    def __init__(self, root: Path, port: int, pki: Pki) -> None:
        self.root, self.port, self.pki = root, port, pki

    def url(self, user: str = "esched", **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgresql://{user}@127.0.0.1:{self.port}/esched" + (f"?{query}" if query else "")

    def verified(self, **params: str) -> str:
        """The URL with the server checked against the test CA, the client certificate."""
        return self.url(
            sslmode="verify-full",
            sslrootcert=str(self.pki.ca),
            sslcert=str(self.pki.client_cert),
            sslkey=str(self.pki.client_key),
            **params,
        )


@pytest.fixture(scope="module")
def tls_pg() -> Iterator[TlsPostgres]:
    bin_dir = _pg_bin()
    if bin_dir is None or os.geteuid() != 0:
        pytest.skip("needs the PostgreSQL server binaries and root (to run them as postgres)")
    try:
        pg_user = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no postgres user")
    root = Path(tempfile.mkdtemp(prefix="esched-pgtls-"))
    root.chmod(0o755)
    pki = make_pki(root)
    data = root / "data"
    for path in (root, *root.iterdir()):
        os.chown(path, pg_user.pw_uid, pg_user.pw_gid)
    pki.server_key.chmod(0o600)

    def as_postgres(*args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True)

    as_postgres(f"{bin_dir}/initdb", "-D", str(data), "-A", "trust", "-U", "postgres")
    port = free_port()
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(
            f"port = {port}\nlisten_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{root}'\nfsync = off\nssl = on\n"
            f"ssl_cert_file = '{pki.server_cert}'\nssl_key_file = '{pki.server_key}'\n"
            f"ssl_ca_file = '{pki.ca}'\n"
        )
    (data / "pg_hba.conf").write_text(
        "local all all trust\n"
        "hostssl all esched 127.0.0.1/32 cert\n"
        "hostssl all postgres 127.0.0.1/32 trust\n"
    )
    as_postgres(f"{bin_dir}/pg_ctl", "-D", str(data), "-l", str(root / "pg.log"), "-w", "start")
    try:
        as_postgres(f"{bin_dir}/psql", "-h", str(root), "-p", str(port), "-U", "postgres",
                    "-c", "CREATE ROLE esched LOGIN SUPERUSER", "-c",
                    "CREATE DATABASE esched OWNER esched")  # fmt: skip
        yield TlsPostgres(root, port, pki)
    finally:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", f"{bin_dir}/pg_ctl", "-D", str(data),
             "-m", "immediate", "stop"],
            capture_output=True,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


async def _tls_sessions(tls_pg: TlsPostgres) -> list[tuple[str, bool]]:
    """(application name, TLS) of every session of role esched (read as postgres, on
    the server's Unix socket)."""
    conn = await asyncpg.connect(
        host=str(tls_pg.root), port=tls_pg.port, user="postgres", database="postgres"
    )
    try:
        rows = await conn.fetch(
            "SELECT a.application_name, s.ssl FROM pg_stat_activity a "
            "JOIN pg_stat_ssl s USING (pid) WHERE a.usename = 'esched'"
        )
    finally:
        await conn.close()
    return [(r[0], r[1]) for r in rows]


async def test_the_store_and_its_leases_work_over_verified_tls_with_a_client_certificate(
    tls_pg,
):
    url = tls_pg.verified()
    lease = open_lease(url, "commit")
    async with open_store(url) as es:
        await es.migrate()
        await append_events(es, node("n1"), pod("a"))
        assert [e.type for e in await es.read(0, 10)] == [
            "esched.node.added",
            "esched.pod.submitted",
        ]
        assert await lease.try_acquire()
        try:
            sessions = await _tls_sessions(tls_pg)
        finally:
            await lease.release()
    assert sessions and all(ssl for _app, ssl in sessions), sessions


async def test_an_encrypted_client_key_takes_its_password_from_the_url_and_never_shows_it(
    tls_pg,
):
    pki = tls_pg.pki
    base = dict(
        sslmode="verify-full",
        sslrootcert=str(pki.ca),
        sslcert=str(pki.client_cert),
        sslkey=str(pki.client_key_encrypted),
    )
    async with open_store(tls_pg.url(**base, sslpassword=pki.key_password)) as es:
        await es.migrate()
        assert await es.head() >= 0
    wrong = tls_pg.url(**base, sslpassword="wrong-key-password-31")
    store = open_store(wrong)
    assert "wrong-key-password-31" not in repr(store)
    with pytest.raises((StoreError, OSError, ValueError)) as err:
        await store.connect()
    await store.close()
    assert "wrong-key-password-31" not in str(err.value)


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"sslmode": "disable"}, "no encryption"),
        ({"sslmode": "verify-full", "sslrootcert": "OTHER"}, "certificate verify failed"),
    ],
    ids=["plaintext", "untrusted-server"],
)
async def test_without_tls_or_with_an_untrusted_server_the_store_does_not_connect(
    tls_pg, params, words
):
    params = {k: str(tls_pg.pki.other_ca) if v == "OTHER" else v for k, v in params.items()}
    store = open_store(tls_pg.url(user="postgres", **params))
    with pytest.raises(StoreError, match=words):
        await store.connect()
    await store.close()
