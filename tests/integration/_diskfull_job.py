"""The jobs of test_disk_full.py, run inside a private mount namespace whose small tmpfs fills up.

Commands (each rank writes what it saw to ``OUT/<command>-rank<r>.json``):

``data KIND ROOT URL OUT`` (MPI)
    Writes steps of one dataset into the data root ROOT (on the small tmpfs; the catalog
    URL elsewhere) until the file system is full: KIND ``mpiio`` through MPI-IO's
    collective write, ``subfiled`` through one subfile per rank (POSIX ``pwrite``). Then,
    the disk still full: the session is closed, the committed steps are read back in
    a new session with ``verify=True`` and compared with :func:`reference`, and rank 0
    reads the run's meta-file.
``catalog ROOT URL FULL OUT`` (MPI)
    The data root ROOT is roomy, the catalog is on the small tmpfs FULL: three steps are
    written, the rest of FULL is filled with a file, and steps are written until the
    catalog refuses one; the session is closed (the disk still full). Then the filler is
    removed, every committed step reads back verified, and the catalog is checked: its
    rows (raw SQL) are the committed steps, each pointing at bytes equal to
    :func:`reference` (``numpy.fromfile``), and (SQLite) the database passes its
    integrity check.
``readonly ROOT OUT`` (MPI)
    Data and catalog (``ROOT/catalog.db``) on the small tmpfs: a run whose single-process
    writer died without closing, then a closed run (whose session, the catalog's last
    user, removes SQLite's WAL files); the rest of the disk is filled with a file; then
    both runs are read back verified and rank 0 runs ``sdm verify``, ``ls``, ``show`` and
    ``find`` (each in its own process).
``metafile FULL OUT`` (one process)
    A meta-file in a directory on the small tmpfs FULL: a first record, the disk filled,
    then records of 10 kB appended until one is refused (the first takes the page's
    slack and then fails), then the filler removed and one more record appended.
``pg FULL ROOT OUT`` (one process)
    Starts a PostgreSQL server whose database keeps its tables in a tablespace on the
    small tmpfs FULL, then runs ``catalog`` on two ranks against it.

Every value comes from :func:`reference`, a numpy formula of (step, global index).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

SHAPE = (128, 128)  #: the dataset's shape: 128 KiB a step
SMALL_SHAPE = (16, 16)  #: the catalog and read-only jobs' shape
MAX_STEPS = 64  #: 8 MiB: more than the data job's tmpfs holds
MAX_CATALOG_STEPS = 2000  #: more rows than the catalog's tmpfs holds once filled
APP = "diskfull"
HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")


def reference(step: int, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    """The global array written at *step*."""
    n = int(np.prod(shape))
    return (np.arange(n, dtype="<f8") % 1013 + 0.25 * step + 10000.0 * step).reshape(shape)


def _local(g: Any, glob: np.ndarray) -> np.ndarray:
    p = g.piece("T")
    return np.ascontiguousarray(glob[np.ix_(*p.indices)])


def _error(exc: BaseException) -> dict[str, Any]:
    return {"cls": type(exc).__name__, "errno": getattr(exc, "errno", None), "message": str(exc)}


def _save(out: str, command: str, rank: int, result: dict[str, Any]) -> None:
    Path(out, f"{command}-rank{rank}.json").write_text(json.dumps(result, default=str))


def fill(directory: str) -> int:
    """Fill the file system of *directory* with one file (``filler``); the bytes it took."""
    fd = os.open(os.path.join(directory, "filler"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    done = 0
    try:
        for size in (1 << 16, 4096, 512, 1):
            try:
                while True:
                    done += os.write(fd, b"\0" * size)
            except OSError:
                continue
    finally:
        os.close(fd)
    return done


def read_back(root: str, url: str, run: int, steps: list[int], shape: tuple[int, ...]) -> int:
    """Read every step of *run* in a new session, verified, and compare it with the reference; how many."""
    import sdm

    count = 0
    with sdm.open(APP, "r", root=root, catalog=url, run=run) as s:
        g = s.group("f")
        assert g.steps("T") == steps, (g.steps("T"), steps)
        for step in steps:
            np.testing.assert_array_equal(g.read("T", step, verify=True), _local(g, reference(step, shape)))
            count += 1
    return count


# ----------------------------------------------------------------------------- data
def data(kind: str, root: str, url: str, out: str) -> None:
    import sdm
    from mpi4py import MPI

    from sdm.catalog.metafile import read_meta

    rank = MPI.COMM_WORLD.rank
    result: dict[str, Any] = {"committed": [], "error": None, "close": None}
    s = sdm.open(APP, root=root, catalog=url, attributes={"kind": kind})
    try:
        options = {"subfiles": s.size} if kind == "subfiled" else {}
        g = s.make_group("f", ["T"], dtype="<f8", shape=SHAPE, level=3, **options)
        if kind == "nonblocking":  # two dumps in flight: each submission waits for the one before the last
            handles: list[Any] = []
            for step in range(MAX_STEPS):
                handles.append(g.write("T", step, _local(g, reference(step)), method="collective", wait=False))
                if len(handles) < 2:
                    continue
                try:
                    handles[-2].wait()
                except sdm.SDMError as exc:
                    result["error"], result["failed"] = _error(exc), step - 1
                    break
                result["committed"].append(step - 1)
            result["states"] = [h.state for h in handles]
        for step in range(MAX_STEPS if kind != "nonblocking" else 0):
            try:
                g.write("T", step, _local(g, reference(step)), method="collective" if kind == "mpiio" else None)
            except sdm.SDMError as exc:
                result["error"], result["failed"] = _error(exc), step
                break
            result["committed"].append(step)
        result["recorded"] = g.steps("T")  # what the catalog holds, after the failure
        result["run"] = s.run_id
        run_dir = s.root / s.run_dir
    finally:
        try:
            s.close()
        except sdm.SDMError as exc:  # the disk is still full: the close may have more to write
            result["close"] = _error(exc)
    result["read"] = read_back(root, url, result["run"], result["committed"], SHAPE)
    if rank == 0:
        log = read_meta(run_dir)
        result["meta_notes"] = log.notes
        result["meta_steps"] = sorted(w["step"] for r in log.records if r["t"] == "writes" for w in r["writes"])
    _save(out, "data", rank, result)


# ----------------------------------------------------------------------------- catalog
def catalog(root: str, url: str, full: str, out: str) -> None:
    import sdm
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.rank
    result: dict[str, Any] = {"committed": [], "error": None, "close": None}
    s = sdm.open(APP, root=root, catalog=url, attributes={"kind": "catalog"})
    try:
        g = s.make_group("f", ["T"], dtype="<f8", shape=SMALL_SHAPE, level=3)
        for step in range(MAX_CATALOG_STEPS):
            if step == 3:
                comm.Barrier()
                if rank == 0:
                    result["filled"] = fill(full)
                comm.Barrier()
            try:
                g.write("T", step, _local(g, reference(step, SMALL_SHAPE)))
            except sdm.SDMError as exc:
                result["error"], result["failed"] = _error(exc), step
                break
            result["committed"].append(step)
        result["run"] = s.run_id
    finally:
        try:
            s.close()
        except sdm.SDMError as exc:
            result["close"] = _error(exc)
    comm.Barrier()
    if rank == 0:
        os.remove(os.path.join(full, "filler"))
    comm.Barrier()
    result["read"] = read_back(root, url, result["run"], result["committed"], SMALL_SHAPE)
    if rank == 0:
        result.update(check_rows(url, root, result["run"]))
    _save(out, "catalog", rank, result)


def check_rows(url: str, root: str, run: int) -> dict[str, Any]:
    """The catalog's rows of *run* by raw SQL, each row's bytes compared with the reference (numpy alone)."""
    import sqlalchemy as sa

    sa_url = url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = sa.create_engine(sa_url)
    try:
        with engine.connect() as con:
            rows = con.execute(sa.text(
                "SELECT w.step, f.path, w.\"offset\", w.nbytes FROM writes w JOIN files f ON f.id = w.file_id "
                "JOIN datasets d ON d.id = w.dataset_id JOIN groups g ON g.id = d.group_id "
                "WHERE g.run_id = :r ORDER BY w.step"), {"r": run}).all()
            state = con.execute(sa.text("SELECT state FROM runs WHERE id = :r"), {"r": run}).scalar_one()
            problems = ([r[0] for r in con.exec_driver_sql("PRAGMA integrity_check")]
                        if con.dialect.name == "sqlite" else ["ok"])
    finally:
        engine.dispose()
    equal = []
    for step, path, offset, nbytes in rows:
        got = np.fromfile(os.path.join(root, path), dtype="<f8", count=int(nbytes) // 8, offset=int(offset))
        equal.append(bool(np.array_equal(got, reference(int(step), SMALL_SHAPE).ravel())))
    return {"rows": [int(r[0]) for r in rows], "rows_equal": equal, "state": state, "integrity": problems}


# ----------------------------------------------------------------------------- read-only
def _died_writer(root: str, url: str) -> None:
    """A single-process writer that writes two steps and dies without closing its session."""
    code = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "import sdm, _diskfull_job as j\n"
        f"s = sdm.open(j.APP, root={root!r}, catalog={url!r}, attributes={{'case': 'died'}})\n"
        "g = s.make_group('f', ['T'], dtype='<f8', shape=j.SMALL_SHAPE, level=3)\n"
        "for step in (0, 1):\n"
        "    g.write('T', step, j.reference(step, j.SMALL_SHAPE))\n"
        "os._exit(0)\n"
    )
    subprocess.run([PYTHON, "-c", code], env=_plain_env(), check=True, timeout=120)


def _plain_env() -> dict[str, str]:
    """This process's environment without the MPI launcher's variables (a child is its own job)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "MPI", "HYDRA"))}


def readonly(root: str, out: str) -> None:
    import sdm
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.rank
    url = f"{root}/catalog.db"
    if rank == 0:  # first: the closed run's session then is the catalog's last user, which removes its WAL files
        _died_writer(root, url)
    comm.Barrier()
    with sdm.open(APP, root=root, catalog=url, attributes={"case": "closed"}) as s:
        g = s.make_group("f", ["T"], dtype="<f8", shape=SMALL_SHAPE, level=3)
        for step in range(3):
            g.write("T", step, _local(g, reference(step, SMALL_SHAPE)))
        closed = s.run_id
    result: dict[str, Any] = {"closed": closed}
    if rank == 0:
        result["files"] = sorted(os.listdir(root))
        result["filled"] = fill(root)
        st = os.statvfs(root)
        result["free"] = st.f_bavail * st.f_frsize
    comm.Barrier()
    result["read"] = {}
    for case, steps in (("closed", [0, 1, 2]), ("died", [0, 1])):
        try:
            with sdm.open(APP, "r", root=root, catalog=url, attributes={"case": case}) as s:
                g = s.group("f")
                n = 0
                for step in steps:
                    np.testing.assert_array_equal(g.read("T", step, verify=True),
                                                  _local(g, reference(step, SMALL_SHAPE)))
                    n += 1
                result["read"][case] = {"run": s.run_id, "compared": n, "steps": g.steps("T")}
        except sdm.SDMError as exc:
            result["read"][case] = _error(exc)
    comm.Barrier()
    if rank == 0:
        died = result["read"]["died"].get("run", closed - 1)
        result["cli"] = {}
        for args in (["verify", str(closed)], ["verify", str(died)], ["ls"], ["ls", APP], ["show", str(closed)],
                     ["find", "case=closed"]):
            p = subprocess.run([PYTHON, "-m", "sdm", *args, "--catalog", url], env={**_plain_env(), "COLUMNS": "200"},
                               capture_output=True, text=True, timeout=120)
            result["cli"][" ".join(args)] = {"rc": p.returncode, "out": p.stdout, "err": p.stderr}
        result["files_after"] = sorted(os.listdir(root))
    _save(out, "readonly", rank, result)


# ----------------------------------------------------------------------------- meta-file
def metafile(full: str, out: str) -> None:
    from datetime import datetime, timezone

    from sdm.catalog.metafile import BACKUP, META, MetaFile, read_meta
    from sdm.errors import SDMError

    def attributes(n: Any, pad: str) -> dict[str, Any]:  # a run's attributes record, as SDM writes it
        return {"t": "attributes", "group": None, "datasets": [], "on_group": True,
                "attributes": {"n": n, "pad": pad}}

    run = Path(full, "run")
    run.mkdir()
    meta = MetaFile(run, sync=True)
    meta.run(application="full", run_id=1, catalog_id="c" * 32, nprocs=1, problem_size=None, attributes=None,
             created=datetime.now(timezone.utc), root=str(full), directory="run")
    result: dict[str, Any] = {"appended": [0], "error": None}
    meta.append(attributes(0, "a" * 1000))  # the files' last pages keep room
    result["filled"] = fill(full)
    for n in range(1, 100):
        try:
            meta.append(attributes(n, "b" * 10000))
        except SDMError as exc:
            result["error"] = _error(exc)
            break
        result["appended"].append(n)
    result["sizes"] = [os.path.getsize(run / name) for name in (META, BACKUP)]
    os.remove(os.path.join(full, "filler"))
    meta.append(attributes("after", ""))
    meta.close()
    log = read_meta(run)
    result.update(used=log.path.name, notes=log.notes,
                  records=[r["attributes"]["n"] for r in log.records if r["t"] == "attributes"])
    result["backup"] = (run / BACKUP).read_bytes() == (run / META).read_bytes()
    _save(out, "metafile", 0, result)


# ----------------------------------------------------------------------------- PostgreSQL
def pg(full: str, root: str, out: str) -> None:
    """A PostgreSQL server whose database keeps its tables on the small tmpfs *full*, and the catalog job against it."""
    import pwd

    sys.path.insert(0, str(HERE))
    import pgserver

    server = pgserver.PgServer()
    server.start()
    try:
        space = Path(full, "tablespace")
        space.mkdir()
        user = pwd.getpwnam(pgserver.server_user()) if os.geteuid() == 0 else None
        if user is not None:
            os.chown(space, user.pw_uid, user.pw_gid)
        server.psql(f"CREATE TABLESPACE small LOCATION '{space}'")
        name = server.create_database()
        server.psql(f"ALTER DATABASE {name} SET default_tablespace = small")
        url = server.url_for(name)
        job = subprocess.run([MPIEXEC, "-n", "2", PYTHON, __file__, "catalog", root, url, full, out],
                             env=os.environ.copy(), capture_output=True, text=True, timeout=600)
        Path(out, "pg-job.txt").write_text(job.stdout + job.stderr)
        Path(out, "pg-job.rc").write_text(str(job.returncode))
    finally:
        server.stop()


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    {"data": data, "catalog": catalog, "readonly": readonly, "metafile": metafile, "pg": pg}[command](*args)


if __name__ == "__main__":
    main(sys.argv[1:])
