"""Passwords in catalog URLs never appear in messages, reprs, logs, files or the ``sdm`` command's output.

A real PostgreSQL server with password authentication (scram-sha-256) for roles made
here: connections with the right password work, with a wrong one they fail; in both
cases, and for unreachable hosts, nothing SDM shows contains the password: exception
messages and their full tracebacks, ``Catalog.url``, ``repr(Catalog)``, the engine's repr,
``Session.catalog_url`` (one rank in this process and two ranks under mpiexec), and the
output of ``sdm ls`` / ``sdm find``.

A role whose password holds every character that breaks URL parsers (``@ : / ? # %``,
spaces, quotes, a backslash, ``& = +``) writes a run through its percent-encoded URL (in
the user part and in the query): the run's meta-file and every other file SDM wrote,
``sdm ls/show/find --json``, the session's and catalog's reprs and the log records hold
neither the password nor any piece of it. A Hypothesis property then drives wrong
passwords from the printable set, raw and percent-encoded, through ``sdm.open`` and
``sdm ls`` against the same server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
import uuid
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
import typer
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from secret_checks import HARMLESS, LEAKS, PASSWORDS, assert_clean, everything, log_records
from sqlalchemy.engine import make_url

import sdm
from sdm._cli.main import app
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


def _role(postgres_server, postgres_url: str, password: str) -> tuple[str, str, str]:
    """A new role that must log in with *password* (scram-sha-256), owning the fresh database:
    ``(role, database, host:port)``."""
    role = "sdm_pw_" + uuid.uuid4().hex[:10]
    assert "$pw$" not in password
    postgres_server.psql(f"CREATE ROLE {role} LOGIN PASSWORD $pw${password}$pw$")
    db = make_url(postgres_url).database
    postgres_server.psql(f'ALTER DATABASE "{db}" OWNER TO {role}')
    hba = postgres_server.datadir / "pg_hba.conf"
    stat = hba.stat()
    hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())  # before 'trust'
    os.chown(hba, stat.st_uid, stat.st_gid)
    postgres_server.psql("SELECT pg_reload_conf()")
    return role, str(db), f"127.0.0.1:{postgres_server.port}"


@pytest.fixture
def password_url(postgres_server, postgres_url: str) -> str:
    """URL of a fresh database owned by a new role that must log in with PASSWORD."""
    role, db, where = _role(postgres_server, postgres_url, PASSWORD)
    return f"postgresql://{role}:{PASSWORD}@{where}/{db}"


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


def _command() -> typer.core.TyperGroup:
    return typer.main.get_command(app)


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


# ------------------------------------------------------------------ passwords that break URL parsers
# Every character URL parsers cut at, between pieces that appear nowhere by chance
HOSTILE = "Zeb7@Quo8:Vix9/Wam6?Yod5#Kel4%40Hup3 Tir2'Sag1\"Nox0\\Ruf8&Pim7=Lak6+Gos5"
EXAMPLES = int(os.environ.get("SDM_SECRET_EXAMPLES", "40"))


def _catalog_rows(url: str) -> str:
    """Every row of every table of the catalog, as text."""
    import sqlalchemy as sa

    from sdm.catalog import schema as S

    cat = Catalog(url, create=False)
    try:
        with cat.engine.connect() as con:
            return "\n".join(repr(row) for t in S.metadata.sorted_tables for row in con.execute(sa.select(t)))
    finally:
        cat.close()


def test_a_password_with_every_breaking_character_writes_a_run_and_is_shown_nowhere(
        postgres_server, postgres_url: str, tmp_path: Path) -> None:
    from mpi4py import MPI

    role, db, where = _role(postgres_server, postgres_url, HOSTILE)
    encoded = quote(HOSTILE, safe="")
    urls = {"user part": f"postgresql://{role}:{encoded}@{where}/{db}",
            "query": f"postgresql://{role}@{where}/{db}?sslmode=disable&password={encoded}"}
    data = tmp_path / "data"
    shown: list[str] = []
    T = np.arange(16.0).reshape(4, 4) * 1.5  # one rank: the local array is the whole dataset
    with log_records() as logged:
        for how, url in urls.items():
            with sdm.open("hostile", "w", catalog=url, root=data, comm=MPI.COMM_SELF, attributes={"how": how}) as s:
                g = s.make_group("fields", ["T"], dtype="f8", shape=(4, 4), level=3)
                g.write("T", 0, T)
                s.set_info("units", np.array(["m", "s"]))
                assert ":***@" in s.catalog_url or "password=***" in s.catalog_url
                shown += [s.catalog_url, repr(s), repr(vars(s)), repr(s.catalog), repr(vars(s.catalog)),
                          repr(s.catalog.engine), str(s.catalog.engine.url)]
                run = s.run_id
            with sdm.open("hostile", "r", catalog=url, run=run, comm=MPI.COMM_SELF) as r:  # the URL works
                back = r.group("fields").read("T", 0, verify=True)
                shown += [r.catalog_url, repr(vars(r))]
            assert np.array_equal(back, T)
            for args in (("ls", "--json"), ("ls", "hostile", "--json"), ("show", str(run), "--json"),
                         ("show", str(run), "--writes"), ("find", f"how={how}", "--json"), ("verify", str(run))):
                out = _sdm(*args, "--catalog", url)
                assert out.returncode == 0, (args, out.stderr)
                shown.append(out.stdout + out.stderr)
            assert json.loads(_sdm("show", str(run), "--json", "--catalog", url).stdout)["run"]["id"] == run
            found = json.loads(_sdm("find", f"how={how}", "--json", "--catalog", url).stdout)["runs"]
            assert [r["id"] for r in found] == [run]
    shown += logged
    files = [p for p in data.rglob("*") if p.is_file()]
    assert any(p.name == ".sdm-meta.jsonl" for p in files)  # the runs' meta-files are among them
    shown += [p.read_bytes().decode("utf-8", "replace") for p in files]
    shown.append(_catalog_rows(urls["user part"]))
    assert_clean("\n".join(shown), HOSTILE)


@pytest.fixture
def hostile_role(postgres_server, postgres_url: str) -> tuple[str, str, str]:
    return _role(postgres_server, postgres_url, HOSTILE)


WRONG_FORMS = {
    "raw": lambda role, where, db, pw: f"postgresql://{role}:{pw}@{where}/{db}",
    "encoded": lambda role, where, db, pw: f"postgresql://{role}:{quote(pw, safe='')}@{where}/{db}",
    "query": lambda role, where, db, pw: f"postgresql://{role}@{where}/{db}?password={quote(pw, safe='')}",
}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck), print_blob=False)
@given(password=PASSWORDS, form=st.sampled_from(sorted(WRONG_FORMS)))
def test_wrong_passwords_of_any_characters_are_shown_nowhere(hostile_role, password: str, form: str) -> None:
    """Against the real server: a refused login (or a URL refused before it) through sdm.open and sdm ls."""
    from mpi4py import MPI

    role, db, where = hostile_role

    def shown(pw: str) -> str:
        url = WRONG_FORMS[form](role, where, db, pw)
        with log_records() as logged, pytest.raises(CatalogUnavailableError) as info:
            sdm.open("app", "r", catalog=url, comm=MPI.COMM_SELF)
        text = [everything(info.value), *logged]
        result = CliRunner().invoke(_command(), ["ls", "--catalog", url], env={"SDM_CATALOG": None})
        assert result.exit_code == 1 and result.stderr.startswith("error: "), result.stderr
        return "\n".join([*text, result.stdout, result.stderr])

    assert_clean(shown(password), password, shown(HARMLESS))


@pytest.mark.parametrize("name", sorted(LEAKS))
def test_the_forms_that_leaked_are_masked_through_sdm_open(name: str) -> None:
    """The exception of sdm.open (message, repr, traceback, chain) and the log records hold no piece of them."""
    from mpi4py import MPI

    url, leaked = LEAKS[name]
    with log_records() as logged, pytest.raises(CatalogUnavailableError) as info:
        sdm.open("app", "r", catalog=url, comm=MPI.COMM_SELF)
    text = "\n".join([everything(info.value), *logged])
    assert leaked not in text and "TopSecret" not in text, text
    assert str(info.value).startswith(("catalog URL 'postgresql://alice:***@127.0.0.1:",
                                       "cannot open catalog 'postgresql://127.0.0.1:1/sdm?pass%77ord=***': "))
