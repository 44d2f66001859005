"""Passwords in catalog URLs never appear in messages, reprs or the ``sdm`` command's output.

A real PostgreSQL server with password authentication (scram-sha-256) for one role made
here: connections with the right password work, with a wrong one they fail; in both
cases, and for unreachable hosts, nothing SDM shows contains the password: exception
messages and their full tracebacks, ``Catalog.url``, ``repr(Catalog)``, the engine's repr,
``Session.catalog_url`` (one rank in this process and two ranks under mpiexec), and the
output of ``sdm ls`` / ``sdm find``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

import sdm
from sdm.catalog import Catalog
from sdm.errors import (
    ApplicationNotFoundError,
    CatalogError,
    CatalogUnavailableError,
    RunNotFoundError,
    SDMError,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.postgres]

BIN = Path(sys.executable).parent
PASSWORD = "Pa55-w0rd-" + uuid.uuid4().hex[:10]
WRONG = "Wr0ng-" + uuid.uuid4().hex[:10]


@pytest.fixture
def password_url(postgres_server, postgres_url: str) -> str:
    """URL of a fresh database owned by a new role that must log in with PASSWORD."""
    role = "sdm_pw_" + uuid.uuid4().hex[:10]
    postgres_server.psql(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
    db = make_url(postgres_url).database
    postgres_server.psql(f'ALTER DATABASE "{db}" OWNER TO {role}')
    hba = postgres_server.datadir / "pg_hba.conf"
    stat = hba.stat()
    hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())  # before 'trust'
    os.chown(hba, stat.st_uid, stat.st_gid)
    postgres_server.psql("SELECT pg_reload_conf()")
    return f"postgresql://{role}:{PASSWORD}@127.0.0.1:{postgres_server.port}/{db}"


def _with_password(url: str, password: str) -> str:
    u = make_url(url)
    return u.set(password=password).render_as_string(hide_password=False)


def _masked(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _everything(exc: BaseException) -> str:
    """All an exception can show: message, repr, and the formatted traceback with its chain."""
    return "\n".join([str(exc), repr(exc), "".join(traceback.format_exception(exc))])


def _clean(text: str) -> None:
    assert PASSWORD not in text
    assert WRONG not in text


def test_right_password_connects_and_shows_no_password(password_url: str) -> None:
    cat = Catalog(password_url)
    try:
        run = cat.create_run("app", nprocs=1, root="/r", attributes={"a": 1})
        assert cat.run(run).attributes == {"a": 1}
        assert cat.url == _masked(password_url)
        assert ":***@" in cat.url
        for shown in (cat.url, repr(cat), str(cat), repr(cat.engine), str(cat.engine.url), repr(vars(cat))):
            _clean(shown)
        errors = []
        for call in (lambda: cat.run(999), lambda: cat.latest_run("nope"), lambda: cat.latest_run("app", {"a": 2}),
                     lambda: cat.set_attributes(999, {"a": 1})):
            with pytest.raises(SDMError) as info:
                call()
            errors.append(info.value)
        assert [type(e) for e in errors] == [RunNotFoundError, ApplicationNotFoundError, RunNotFoundError,
                                             RunNotFoundError]
        assert str(errors[0]) == f"no run 999 in catalog {_masked(password_url)!r}"
        for e in errors:
            _clean(_everything(e))
    finally:
        cat.close()


@pytest.mark.parametrize("how", ["wrong password", "closed port", "unknown host"])
def test_failed_connections_show_no_password(password_url: str, how: str) -> None:
    u = make_url(password_url)
    url = {
        "wrong password": _with_password(password_url, WRONG),
        "closed port": _with_password(u.set(port=1).render_as_string(hide_password=False), PASSWORD),
        "unknown host": _with_password(u.set(host="no-such-host.invalid").render_as_string(hide_password=False),
                                       PASSWORD),
    }[how]
    with pytest.raises(CatalogUnavailableError) as info:
        Catalog(url)
    text = _everything(info.value)
    _clean(text)
    assert str(info.value).startswith(f"cannot open catalog {_masked(url)!r}: ")
    if how == "wrong password":
        assert "password authentication failed" in str(info.value)


def test_password_in_the_query_string_is_masked(password_url: str) -> None:
    u = make_url(password_url)
    url = u.set(password=None).update_query_dict({"password": PASSWORD}).render_as_string(hide_password=False)
    assert PASSWORD in url
    cat = Catalog(url)
    try:
        cat.create_run("app", nprocs=1, root="/r")
        _clean(cat.url)
        _clean(repr(cat))
        with pytest.raises(RunNotFoundError) as info:
            cat.run(999)
        _clean(_everything(info.value))
    finally:
        cat.close()
    bad = url.replace(PASSWORD, WRONG)
    with pytest.raises(CatalogUnavailableError) as info:
        Catalog(bad)
    _clean(_everything(info.value))


def _sdm(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ}
    src = str(Path(sdm.__file__).resolve().parents[1])  # the sdm under test
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "sdm", *args], capture_output=True, text=True, timeout=90, env=env)


def test_cli_output_shows_no_password(password_url: str) -> None:
    cat = Catalog(password_url)
    cat.create_run("app", nprocs=1, root="/r", attributes={"a": 1})
    cat.close()
    ok = _sdm("ls", "--catalog", password_url)
    assert ok.returncode == 0, ok.stderr
    assert "app" in ok.stdout
    _clean(ok.stdout + ok.stderr)
    u = make_url(password_url)
    failing = {
        "wrong password": _with_password(password_url, WRONG),
        "closed port": _with_password(u.set(port=1).render_as_string(hide_password=False), PASSWORD),
        "unknown host": _with_password(u.set(host="no-such-host.invalid").render_as_string(hide_password=False),
                                       PASSWORD),
    }
    calls = [(how, ("ls", "--catalog", url)) for how, url in failing.items()]
    calls += [("wrong password", ("find", "--catalog", failing["wrong password"], "a=1")),
              ("wrong password", ("show", "1", "--catalog", failing["wrong password"]))]
    for how, args in calls:
        url = failing[how]
        out = _sdm(*args)
        assert out.returncode == 1, (how, args, out.stderr)
        assert out.stdout == ""
        assert out.stderr.startswith(f"error: cannot open catalog {_masked(url)!r}: "), (how, out.stderr)
        assert "Traceback" not in out.stderr
        _clean(out.stdout + out.stderr)
    missing_app = _sdm("ls", "nope", "--catalog", password_url)
    assert missing_app.returncode == 1
    assert missing_app.stderr.startswith(f"error: no application 'nope' in catalog {_masked(password_url)!r}")
    _clean(missing_app.stdout + missing_app.stderr)


def test_session_catalog_url_is_masked(password_url: str, tmp_path: Path) -> None:
    from mpi4py import MPI

    with sdm.open("app", "w", catalog=password_url, root=tmp_path, comm=MPI.COMM_SELF) as s:
        assert s.catalog_url == _masked(password_url)
        _clean(repr(vars(s)))
        run = s.run_id
    with sdm.open("app", "r", catalog=password_url, run=run, comm=MPI.COMM_SELF) as r:  # the real URL still works
        assert r.run_id == run
    with pytest.raises(CatalogError) as info:
        sdm.open("app", "r", catalog=_with_password(password_url, WRONG), comm=MPI.COMM_SELF)
    _clean(_everything(info.value))
    assert _masked(password_url) in str(info.value)


SCRIPT = r'''
import sys, traceback
from mpi4py import MPI
import sdm

url, wrong, root = sys.argv[1:4]
comm = MPI.COMM_WORLD
lines = []
with sdm.open("app", "w", catalog=url, root=root, comm=comm) as s:
    lines.append(f"url {s.catalog_url}")
try:
    sdm.open("app", "r", catalog=wrong, comm=comm)
    lines.append("error none")
except sdm.SDMError as exc:
    lines.append(f"error {type(exc).__name__}: {exc}")
    lines.append("".join(traceback.format_exception(exc)))
for rank in range(comm.Get_size()):
    if rank == comm.Get_rank():
        print(f"[{rank}] " + "\n".join(lines), flush=True)
    comm.Barrier()
'''


def test_two_ranks_never_see_the_password(password_url: str, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(SCRIPT)
    env = {**os.environ}
    src = str(Path(sdm.__file__).resolve().parents[1])  # the sdm under test
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    wrong = _with_password(password_url, WRONG)
    out = subprocess.run([str(BIN / "mpiexec"), "-n", "2", sys.executable, "job.py", password_url, wrong,
                          str(tmp_path / "data")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr[-3000:]
    _clean(out.stdout + out.stderr)
    for rank in (0, 1):
        assert f"[{rank}] url {_masked(password_url)}" in out.stdout
    assert out.stdout.count("error CatalogUnavailableError: cannot open catalog "
                            f"{_masked(wrong)!r}: ") == 2
