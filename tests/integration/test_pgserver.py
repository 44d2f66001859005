"""The test infrastructure itself: both catalog engines are real and reachable."""

from __future__ import annotations

import re
import socket

import pytest
import sqlalchemy as sa


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


def test_catalog_url_connects(catalog_url: str) -> None:
    engine = _engine(catalog_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("select 1")).scalar_one() == 1
            if engine.dialect.name == "postgresql":
                version = conn.execute(sa.text("select version()")).scalar_one()
                assert version.startswith("PostgreSQL "), version
                addr = conn.execute(sa.text("select host(inet_server_addr())")).scalar_one()
                assert addr == "127.0.0.1"
            else:
                assert engine.dialect.name == "sqlite"
                assert conn.execute(sa.text("select sqlite_version()")).scalar_one()
    finally:
        engine.dispose()


def _listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket in LISTEN state on ``port``, from /proc/net/tcp{,6}."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, _remote, state = line.split()[1:4]
            addr_hex, port_hex = local.split(":")
            if state == "0A" and int(port_hex, 16) == port:
                if len(addr_hex) == 8:
                    found.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(addr_hex)[::-1]))
                else:
                    raw = b"".join(bytes.fromhex(addr_hex[i:i + 8])[::-1] for i in range(0, 32, 8))
                    found.add(socket.inet_ntop(socket.AF_INET6, raw))
    return found


@pytest.mark.postgres
def test_server_listens_on_loopback_only(postgres_server) -> None:
    assert postgres_server.psql("show listen_addresses") == "127.0.0.1"
    assert _listening_addresses(postgres_server.port) == {"127.0.0.1"}


@pytest.mark.postgres
def test_fresh_databases_are_isolated_and_dropped(postgres_server) -> None:
    with postgres_server.fresh_database() as url_a, postgres_server.fresh_database() as url_b:
        name_a, name_b = url_a.rsplit("/", 1)[1], url_b.rsplit("/", 1)[1]
        assert name_a != name_b
        assert re.fullmatch(r"postgresql://\w+@127\.0\.0\.1:\d+/sdm_t_[0-9a-f]+", url_a)
        engine = _engine(url_a)
        try:
            with engine.begin() as conn:
                conn.execute(sa.text("create table t (x int)"))
        finally:
            engine.dispose()
        assert postgres_server.psql("select count(*) from t", dbname=name_a) == "0"
        with pytest.raises(Exception, match="does not exist"):
            postgres_server.psql("select count(*) from t", dbname=name_b)
    existing = postgres_server.psql("select datname from pg_database").split()
    assert name_a not in existing and name_b not in existing
    assert "sdm_test" in existing
