"""Fixtures shared by every test directory.

``catalog_url`` runs a test once per catalog engine:

* ``sqlite``      -> ``sqlite:///<tmp_path>/catalog.db``
* ``postgresql``  -> a fresh, uniquely named database on a real PostgreSQL server
  (``postgresql://sdmtest@127.0.0.1:PORT/sdm_t_...``), dropped after the test; these tests
  carry the ``postgres`` marker (deselect with ``-m "not postgres"`` when iterating locally).

The server (``postgres_server``) is started lazily, once per session, only when a test asks
for it, and stopped at the end of the session; when the run is killed instead (``timeout``'s
SIGTERM or SIGKILL), a watcher process started with the server stops it once the test
process is gone (no signal handler is installed). It is never skipped: if it cannot start, the tests that need it
error, so CI cannot pass without having exercised PostgreSQL.

``s3_server`` (versitygw, POSIX backend) and ``toxiproxy`` (a proxy in front of it whose
toxics are cleared after each test) come from ``tests/integration/s3server.py`` the same way:
started lazily once per session, stopped at its end, never skipped. While ``s3_server``
runs, the standard AWS variables hold its per-session root credentials and region
(restored afterwards); clients get the endpoint explicitly (``s3_server.endpoint`` or
``toxiproxy.endpoint``).
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "integration"))
import pgserver  # noqa: E402  (tests/integration/pgserver.py)
import s3server  # noqa: E402  (tests/integration/s3server.py)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[pgserver.PgServer]:
    """A real PostgreSQL server on 127.0.0.1 for the whole session (see pgserver.py)."""
    server = pgserver.PgServer()  # a watcher process stops it if this process is killed
    atexit.register(server.stop)  # backstop; stop() is idempotent
    try:
        error = None
        try:
            server.start()
        except pgserver.PgServerError as exc:
            error = str(exc)
        if error is not None:  # failed outside the except block: no chained traceback
            pytest.fail(f"could not start the test PostgreSQL server: {error}", pytrace=False)
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: pgserver.PgServer) -> Iterator[str]:
    """URL of a fresh, uniquely named PostgreSQL database, dropped after the test."""
    with postgres_server.fresh_database() as url:
        yield url


@pytest.fixture(params=[
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
])
def catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A catalog URL for each engine: SQLite file in tmp_path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/catalog.db"
    else:
        yield request.getfixturevalue("postgres_url")


def _started(server: s3server.S3Server | s3server.Toxiproxy) -> None:
    """Start *server*, or fail the test (not skip) with the reason."""
    atexit.register(server.stop)
    error = None
    try:
        server.start()
    except s3server.S3ServerError as exc:
        error = str(exc)
    if error is not None:
        pytest.fail(f"could not start the test {server.name}: {error}", pytrace=False)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[s3server.S3Server]:
    """A real S3 server (versitygw) on 127.0.0.1 for the whole session; its credentials in the AWS variables."""
    server = s3server.S3Server()
    saved = {name: os.environ.get(name) for name in s3server.AWS_VARIABLES}
    try:
        _started(server)
        os.environ.update({k: v for k, v in server.env().items() if k in s3server.AWS_VARIABLES})
        yield server
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def toxiproxy_server(s3_server: s3server.S3Server) -> Iterator[s3server.Proxy]:
    """The toxiproxy server for the session, with proxy ``s3`` in front of ``s3_server``."""
    server = s3server.Toxiproxy()
    try:
        _started(server)
        yield server.proxy("s3", s3_server.address)
    finally:
        server.stop()


@pytest.fixture
def toxiproxy(toxiproxy_server: s3server.Proxy) -> Iterator[s3server.Proxy]:
    """The proxy in front of ``s3_server`` (``.endpoint``, ``.toxic(...)``); no toxic before or after the test."""
    toxiproxy_server.clear()
    yield toxiproxy_server
    toxiproxy_server.clear()
