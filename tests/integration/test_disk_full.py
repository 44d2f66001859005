"""A full disk is ``ENOSPC``, everywhere, and costs nothing already committed.

Each test runs an MPI job (``_diskfull_job.py``) in a private mount namespace
(``unshare --mount --propagation private``) where a small tmpfs is mounted: the host's
mounts never change, and the tmpfs disappears with the job. The job fills it:

* the data root, written through MPI-IO (ROMIO reports a full file system as a generic
  "Other I/O error") and through subfiles (POSIX ``pwrite``): every rank gets the same
  :class:`~sdm.errors.StorageError` with ``errno.ENOSPC`` and a message that says how much
  was needed, how much is free and what to do; the failed step is not in the catalog nor
  in the meta-file, and every earlier step reads back, verified, equal to numpy's;
* the catalog's disk (SQLite on the tmpfs; PostgreSQL with its tables in a tablespace on
  it), data elsewhere: every rank gets :class:`~sdm.errors.CatalogError` with
  ``errno.ENOSPC``, and once space is freed the catalog's rows (raw SQL) are exactly the
  committed steps, each pointing at bytes equal to numpy's;
* one disk holding data and catalog, filled by a file after the runs: ``sdm.open(...,
  "r")``, reads with ``verify=True`` (of a closed run and of one whose writer died),
  ``sdm verify``, ``sdm ls``, ``sdm show`` and ``sdm find`` all work.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from sdm.catalog.metafile import META

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
JOB = HERE / "_diskfull_job.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"
LIMIT = 400
RANKS = 2

pytestmark = [pytest.mark.timeout(LIMIT + 60),
              pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to this Python")]


@cache
def _namespaces() -> str:
    """Why a private mount namespace with a tmpfs cannot be made here ('' when it can)."""
    with tempfile.TemporaryDirectory() as probe:
        try:
            proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                   f"mount -t tmpfs -o size=64k tmpfs {shlex.quote(probe)}"],
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unshare cannot run: {exc}"
        if proc.returncode != 0:
            return f"no private mount namespace with a tmpfs here (needs root or user namespaces): {proc.stderr.strip()}"
    return ""


def in_namespace(tmpfs: Path, size: str, command: list[str]) -> str:
    """Run *command* in a private mount namespace with a tmpfs of *size* at *tmpfs*; its output (exit 0 required)."""
    reason = _namespaces()
    if reason:
        pytest.skip(reason)
    tmpfs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else src
    script = f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(tmpfs))} && exec {shlex.join(command)}"
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{command[:4]} did not finish within {LIMIT} s\n{out[-4000:]}")
    assert proc.returncode == 0, out[-6000:]
    return out


def mpi_job(*args: str) -> list[str]:
    return [str(MPIEXEC), "-n", str(RANKS), sys.executable, str(JOB), *args]


def results(out: Path, command: str) -> list[dict[str, Any]]:
    """What every rank of the job saw."""
    return [json.loads((out / f"{command}-rank{r}.json").read_text()) for r in range(RANKS)]


def committed_rows(catalog: Path) -> list[int]:
    """The steps of dataset T that the SQLite catalog file holds (raw SQL, no SDM)."""
    con = sqlite3.connect(catalog)
    try:
        return [r[0] for r in con.execute("SELECT w.step FROM writes w JOIN datasets d ON d.id = w.dataset_id "
                                          "WHERE d.name = 'T' ORDER BY w.step")]
    finally:
        con.close()


# ----------------------------------------------------------------------------- the data root
@pytest.mark.parametrize("kind, what", [("mpiio", "MPI-IO write of"), ("subfiled", "cannot write subfile"),
                                        ("nonblocking", "MPI-IO write of")])
def test_full_data_disk_is_enospc_on_every_rank(tmp_path: Path, kind: str, what: str) -> None:
    full, out = tmp_path / "full", tmp_path / "out"
    out.mkdir()
    catalog = tmp_path / "catalog.db"
    in_namespace(full, "2m", mpi_job("data", kind, str(full / "data"), f"sqlite:///{catalog}", str(out)))
    seen = results(out, "data")
    for r in seen:
        err = r["error"]
        assert err is not None, f"{kind}: {len(r['committed'])} steps of 128 KiB fitted on a 2 MiB disk"
        assert (err["cls"], err["errno"]) == ("StorageError", errno.ENOSPC), err
        assert what in err["message"] and "no space left on the file system holding" in err["message"], err
        assert "bytes needed" in err["message"] and "bytes free" in err["message"], err
        assert "root=" in err["message"] and "committed before is intact" in err["message"], err
        assert r["committed"] == list(range(len(r["committed"]))) and len(r["committed"]) >= 2
        assert r["failed"] == len(r["committed"])  # the first step that did not fit
        if kind == "nonblocking":  # the dump named; the one issued after it cancelled, nothing of it written
            assert err["message"].startswith(f"nonblocking dump #{r['failed'] + 1} Group.write('T', {r['failed']})")
            assert r["states"][:r["failed"] + 2] == ["done"] * r["failed"] + ["failed", "cancelled"], r["states"]
        assert r["recorded"] == r["committed"]  # the failed step is not in the catalog
        assert r["read"] == len(r["committed"])  # every committed step read back, verified, equal to numpy's
        if r["close"] is not None:  # a trailer that no longer fits: the same error
            assert (r["close"]["cls"], r["close"]["errno"]) == ("StorageError", errno.ENOSPC), r["close"]
    assert all(r["error"] == seen[0]["error"] and r["committed"] == seen[0]["committed"] for r in seen)
    assert seen[0]["meta_notes"] == [] and seen[0]["meta_steps"] == seen[0]["committed"]
    assert committed_rows(catalog) == seen[0]["committed"]


def test_meta_file_append_refused_by_a_full_disk_is_taken_back(tmp_path: Path) -> None:
    full, out = tmp_path / "full", tmp_path / "out"
    out.mkdir()
    in_namespace(full, "1m", [sys.executable, str(JOB), "metafile", str(full), str(out)])
    got = json.loads((out / "metafile-rank0.json").read_text())
    assert got["filled"] > 0
    err = got["error"]
    assert err is not None and (err["cls"], err["errno"]) == ("StorageError", errno.ENOSPC), err
    assert "cannot append to the meta-file" in err["message"] and "no space left on the file system" in err["message"]
    assert got["appended"] == [0]  # the first big record did not fit in the page's room ...
    assert got["sizes"][0] == got["sizes"][1] and got["sizes"][0] < 3000  # ... and nothing of it stayed
    assert got["used"] == META and got["notes"] == [], got  # the meta-file itself, whole: no torn line inside
    assert got["records"] == [0, "after"] and got["backup"]


# ----------------------------------------------------------------------------- the catalog's disk
def _check_catalog_full(seen: list[dict[str, Any]], where: str) -> None:
    for r in seen:
        err = r["error"]
        assert err is not None, f"{len(r['committed'])} steps recorded on a full catalog disk"
        assert (err["cls"], err["errno"]) == ("CatalogError", errno.ENOSPC), err
        assert where in err["message"] and "rolled back" in err["message"] and "Free space" in err["message"], err
        assert "internal error" not in err["message"]
        assert r["committed"][:3] == [0, 1, 2] and r["failed"] == len(r["committed"])
        close = r["close"]  # recording the close may need space too (SQLite), or not (PostgreSQL updates in place)
        assert close is None or (close["cls"], close["errno"]) == ("CatalogError", errno.ENOSPC), close
        assert r["read"] == len(r["committed"])  # after space was freed: every committed step, verified
    assert all(r["error"] == seen[0]["error"] and r["committed"] == seen[0]["committed"] for r in seen)
    rank0 = seen[0]
    assert rank0["filled"] > 0
    assert rank0["rows"] == rank0["committed"]  # nothing of the refused step, nothing lost
    assert rank0["rows_equal"] == [True] * len(rank0["rows"])
    assert rank0["integrity"] == ["ok"]
    # a refused close leaves the run open: the reader found its writers gone
    assert rank0["state"] == ("closed" if rank0["close"] is None else "interrupted")


def test_full_sqlite_catalog_disk_is_enospc_on_every_rank(tmp_path: Path) -> None:
    full, out = tmp_path / "catalog", tmp_path / "out"
    out.mkdir()
    in_namespace(full, "1m", mpi_job("catalog", str(tmp_path / "data"), f"sqlite:///{full}/catalog.db", str(full),
                                     str(out)))
    _check_catalog_full(results(out, "catalog"), f"the file system holding the catalog file {full}/catalog.db is full")


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """An empty directory that PostgreSQL's unprivileged server user can reach (pytest's own are private to root)."""
    made = Path(tempfile.mkdtemp(prefix="sdm-diskfull-"))
    made.chmod(0o755)
    try:
        yield made
    finally:
        shutil.rmtree(made)


@pytest.mark.postgres
def test_full_postgresql_catalog_disk_is_enospc_on_every_rank(tmp_path: Path, reachable_dir: Path) -> None:
    full, out = reachable_dir, tmp_path / "out"
    out.mkdir()
    in_namespace(full, "4m", [sys.executable, str(JOB), "pg", str(full), str(tmp_path / "data"), str(out)])
    assert (out / "pg-job.rc").read_text() == "0", (out / "pg-job.txt").read_text()[-6000:]
    seen = results(out, "catalog")
    _check_catalog_full(seen, "the disk of the catalog's database server is full")
    assert "could not extend file" in seen[0]["error"]["message"]
    assert "sdmtest" not in seen[0]["error"]["message"] and "127.0.0.1" not in seen[0]["error"]["message"]


# ----------------------------------------------------------------------------- reading on a full disk
def test_reading_works_on_a_full_disk(tmp_path: Path) -> None:
    full, out = tmp_path / "full", tmp_path / "out"
    out.mkdir()
    in_namespace(full, "2m", mpi_job("readonly", str(full), str(out)))
    seen = results(out, "readonly")
    rank0 = seen[0]
    assert rank0["filled"] > 0 and rank0["free"] == 0, rank0
    assert "catalog.db-shm" not in rank0["files"]  # SQLite must make its WAL index anew: the disk refuses it
    closed, died = rank0["closed"], rank0["closed"] - 1
    for r in seen:
        assert r["read"]["closed"] == {"run": closed, "compared": 3, "steps": [0, 1, 2]}, r["read"]
        assert r["read"]["died"] == {"run": died, "compared": 2, "steps": [0, 1]}, r["read"]
    cli = rank0["cli"]
    for args, got in cli.items():
        assert got["rc"] == 0, (args, got)
        assert "error" not in got["out"] + got["err"], (args, got)
    assert f"run {closed} (closed): 3 rows, 3 checksums" in cli[f"verify {closed}"]["out"]
    assert ": ok" in cli[f"verify {closed}"]["out"]
    assert f"run {died} " in cli[f"verify {died}"]["out"] and "2 rows" in cli[f"verify {died}"]["out"]
    assert "diskfull" in cli["ls"]["out"] and "2" in cli["ls"]["out"]
    assert "case=died" in cli["ls diskfull"]["out"] and "case=closed" in cli["ls diskfull"]["out"]
    assert "f.sdm" in cli[f"show {closed}"]["out"] and "case=closed" in cli[f"show {closed}"]["out"]
    assert "case=closed" in cli["find case=closed"]["out"] and "case=died" not in cli["find case=closed"]["out"]
