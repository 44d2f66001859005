"""Fill an empty SDM catalog with a large, realistic history of runs (for ``catalog_scale.py``).

The catalog is created by :class:`sdm.catalog.Catalog` (so the schema, indexes and
revision are SDM's own); its rows are then bulk-inserted: on SQLite with ``executemany``
of tuples on a populate-only :mod:`sqlite3` connection (no journal, no syncs, one
transaction per ~200k rows; the file is put back in WAL mode at the end, as SDM keeps
it), on PostgreSQL with psycopg's ``COPY ... FROM STDIN`` followed by ``ANALYZE`` (what
autovacuum would do after such a load) and the id sequences moved past the ids given.

The shape
---------
``writes`` must be a multiple of 10 000 (``runs * datasets``); ``S = writes / 10000``
steps per dataset (10, 100, 1000 for 10^5, 10^6, 10^7).

* **4 applications** :data:`APPS`; **1000 runs**, run index ``i = 0..999`` has id ``i + 1``
  and belongs to ``APPS[i % 4]`` (250 runs each); ``created_at`` increases with ``i``
  over about three years from 2022-01-01 UTC (``i`` * 26.28 h plus a few minutes of
  jitter); state ``closed``, ``nprocs`` in {16, 32, 64, 128, 256}, a run directory
  name in SDM's format (``APP/run-<id>-<UTC time>-<12 hex>``) under the data root given.
* **2 groups per run**, both level 3 (one data file per group, ``files.alloc_end`` =
  the bytes its writes use): ``fields`` with datasets ``rho u v w p`` (``<f8``, shape
  ``[nx, nx, nx]``) and ``analysis`` with ``vort ke enst div q`` (``<f4``, shape
  ``[nx, nx]``), a block distribution recorded on each dataset.
* **Writes**: steps ``0, 10, ..., 10 (S - 1)`` of every dataset; one dump writes the five
  datasets of a group one after the other, so a group file holds step-major,
  dataset-minor records back to back (``offset = (k * 5 + j) * nbytes``);
  ``checksum`` 16 random hex digits, ``checksum_algo`` ``mix64-v2``, one I/O method per
  run and group (with a planner reason), ``seconds`` ~ ``nbytes / 1 GB/s`` with
  log-normal noise, ``nprocs`` the run's, ``written_at`` a minute per step after the
  run's creation, version 1.
* **16 attribute rows per run**, overrides at every level, every value type; with
  ``r = i // 4`` (the run's index within its application):

  ============  ========================================================  =====
  key           run level                                                 type
  ============  ========================================================  =====
  case          ``f"case-{r % 100:02d}"``                                 str
  re            ``1000.0 + 10.0 * ((379 * i) % 1000)`` (a permutation)    float
  nx            ``(64, 128, 256)[i % 3]``                                 int
  mesh          ``("cube", "sphere", "channel", "cylinder", "torus")[i % 5]``  str
  converged     ``i % 7 != 0``                                            bool
  user          ``("alice", "bob", "carol", "dave", "erin", "frank")[i % 6]``  str
  dt            ``1e-3 / (1 + i % 4)``                                    float
  units         ``"SI"``                                                  str
  solver        ``("cg", "gmres", "bicgstab")[(i // 3) % 3]``             str
  tol           ``1e-8``                                                  float
  seed          ``7919 * i``                                              int
  code_version  ``f"2.{i % 10}.0"``                                       str
  ============  ========================================================  =====

  plus group ``fields``: ``dt`` = run's dt / 2; group ``analysis``: ``dt`` = run's dt * 10
  and ``units = "normalized"``; dataset ``fields/p``: ``units = "Pa"`` (12 + 3 + 1 = 16).
  The keys the benchmark searches (``case``, ``re``, ``mesh``, ``nx``) are never
  overridden, so a run matches exactly when its run-level value does.
* **One probe run** more, id :data:`PROBE_RUN` (1001), of its own application
  :data:`PROBE_APP`, made like the others (run index 1000) but with :data:`PROBE_STEPS`
  (10) steps per dataset at every catalog size: what the benchmark shows and commits to,
  so those measure the catalog's size and not the run's. ``writes`` counts the other
  runs' rows; the probe adds 100.
* Each dataset's step summary (``nsteps``, ``first_step``, ``last_step``,
  ``nbytes_written``: schema 0005) is filled as the commits of those writes keep it.

Random parts (checksums, jitter, methods, nprocs, noise) come from ``numpy.random`` seeded
with ``seed``; the attributes, ids and steps above do not depend on it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

APPS = ("astro3d", "heat", "lbm", "fem")
RUNS = 1000
PROBE_APP = "probe"  # one more run, of its own application, whose size never changes
PROBE_RUN = RUNS + 1
PROBE_STEPS = 10
GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("fields", "<f8", ("rho", "u", "v", "w", "p")),
    ("analysis", "<f4", ("vort", "ke", "enst", "div", "q")),
)
DATASETS_PER_RUN = sum(len(names) for _, _, names in GROUPS)
WRITES_PER_STEP = RUNS * DATASETS_PER_RUN  # writes per step of every dataset of every run
LEVEL = 3
STEP_EVERY = 10
START = datetime(2022, 1, 1, tzinfo=timezone.utc)
RUN_SPACING = timedelta(days=3 * 365) / RUNS
METHODS = ("collective", "datatype", "list", "sieving", "posix")
CHUNK = 200_000  # rows per transaction (SQLite) / per COPY flush
SHAPE_VERSION = 2  # bump when the shape above changes (cache keys include it)

__all__ = ["APPS", "RUNS", "PROBE_APP", "PROBE_RUN", "PROBE_STEPS", "populate", "run_attributes", "steps_per_dataset", "shape_key", "SHAPE_VERSION"]


def steps_per_dataset(writes: int) -> int:
    """Steps of every dataset for a catalog of *writes* write rows.

    Raises
    ------
    ValueError
        *writes* is not a positive multiple of 10 000.
    """
    if writes <= 0 or writes % WRITES_PER_STEP:
        raise ValueError(f"writes must be a positive multiple of {WRITES_PER_STEP}, got {writes}")
    return writes // WRITES_PER_STEP


def run_attributes(i: int) -> dict[str, Any]:
    """The run-level attributes of run index *i* (id ``i + 1``), as the module docstring lists."""
    r = i // 4
    return {
        "case": f"case-{r % 100:02d}",
        "re": 1000.0 + 10.0 * ((379 * i) % 1000),
        "nx": (64, 128, 256)[i % 3],
        "mesh": ("cube", "sphere", "channel", "cylinder", "torus")[i % 5],
        "converged": i % 7 != 0,
        "user": ("alice", "bob", "carol", "dave", "erin", "frank")[i % 6],
        "dt": 1e-3 / (1 + i % 4),
        "units": "SI",
        "solver": ("cg", "gmres", "bicgstab")[(i // 3) % 3],
        "tol": 1e-8,
        "seed": 7919 * i,
        "code_version": f"2.{i % 10}.0",
    }


def _lower_attributes(i: int) -> list[tuple[int, int | None, str, Any]]:
    """Group- and dataset-level overrides of run *i*: ``(group index, dataset index or None, key, value)``."""
    dt = 1e-3 / (1 + i % 4)
    return [(0, None, "dt", dt / 2), (1, None, "dt", dt * 10), (1, None, "units", "normalized"),
            (0, 4, "units", "Pa")]


def shape_key(writes: int, seed: int) -> str:
    """A name for a catalog of this shape, size, seed and schema (a cache key).

    The schema part hashes the ``CREATE`` statements SDM's schema renders, so a catalog
    populated before the schema changed is never reused.
    """
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    from sdm.catalog import schema as S

    dialect = sqlite.dialect()
    ddl = []
    for table in S.metadata.sorted_tables:
        ddl.append(str(CreateTable(table).compile(dialect=dialect)))
        ddl += sorted(str(CreateIndex(ix).compile(dialect=dialect)) for ix in table.indexes)
    digest = hashlib.sha256("\n".join(ddl).encode()).hexdigest()[:10]
    return f"shape{SHAPE_VERSION}-schema{S.SCHEMA_VERSION}-{digest}-w{writes}-seed{seed}"


# ----------------------------------------------------------------------------- rows
class _Rows:
    """The rows of every table, as tuples in the column order of :data:`COLUMNS`."""

    def __init__(self, writes: int, seed: int, root: str, stamp: Callable[[datetime], str]) -> None:
        self.steps = steps_per_dataset(writes)
        self.rng = np.random.default_rng(seed)
        self.root = root
        self.stamp = stamp  # datetime -> the engine's text for it
        rng = self.rng
        self.count = RUNS + 1  # the probe run last
        self.created = [START + RUN_SPACING * i + timedelta(seconds=float(s))
                        for i, s in enumerate(rng.uniform(0, 600, self.count))]
        self.nprocs = rng.choice([16, 32, 64, 128, 256], self.count).tolist()
        self.methods = rng.integers(0, len(METHODS), (self.count, len(GROUPS))).tolist()
        self.dirs = [f"{self.app(i)}/run-{i + 1:06d}-{self.created[i].strftime('%Y%m%dT%H%M%SZ')}-"
                     f"{rng.bytes(6).hex()}" for i in range(self.count)]

    @staticmethod
    def app_index(i: int) -> int:
        """Index of run *i*'s application in ``(*APPS, PROBE_APP)``."""
        return len(APPS) if i == RUNS else i % len(APPS)

    def app(self, i: int) -> str:
        return (*APPS, PROBE_APP)[self.app_index(i)]

    def steps_of(self, i: int) -> int:
        """Steps of every dataset of run *i* (the probe run's never change)."""
        return PROBE_STEPS if i == RUNS else self.steps

    @staticmethod
    def group_id(i: int, g: int) -> int:
        return len(GROUPS) * i + g + 1

    @staticmethod
    def dataset_id(i: int, g: int, j: int) -> int:
        return DATASETS_PER_RUN * i + 5 * g + j + 1

    def nbytes(self, i: int, g: int) -> int:
        nx = run_attributes(i)["nx"]
        dtype, ndim = GROUPS[g][1], 3 - g
        return int(np.dtype(dtype).itemsize) * nx ** ndim

    def applications(self) -> list[tuple[Any, ...]]:
        return [(a + 1, name, self.stamp(START - timedelta(days=1))) for a, name in enumerate((*APPS, PROBE_APP))]

    def runs(self) -> list[tuple[Any, ...]]:
        out = []
        for i in range(self.count):
            nx = run_attributes(i)["nx"]
            out.append((i + 1, self.app_index(i) + 1, self.stamp(self.created[i]), self.nprocs[i], json.dumps([nx, nx, nx]),
                        self.root, self.dirs[i], "closed", 0))
        return out

    def groups(self) -> list[tuple[Any, ...]]:
        return [(self.group_id(i, g), i + 1, name, LEVEL, g) for i in range(self.count) for g, (name, _, _) in
                enumerate(GROUPS)]

    def datasets(self) -> list[tuple[Any, ...]]:
        out = []
        for i in range(self.count):
            nx, steps = run_attributes(i)["nx"], self.steps_of(i)
            for g, (_, dtype, names) in enumerate(GROUPS):
                shape = json.dumps([nx] * (3 - g))
                dist = json.dumps({"kind": "block", "grid": None, "ghosts": 1 if g == 0 else 0})
                summary = (steps, 0, STEP_EVERY * (steps - 1), steps * self.nbytes(i, g))  # what commits keep
                out += [(self.dataset_id(i, g, j), self.group_id(i, g), name, j, dtype, shape, "C", dist, *summary)
                        for j, name in enumerate(names)]
        return out

    def files(self) -> list[tuple[Any, ...]]:
        return [(self.group_id(i, g), i + 1, f"{self.dirs[i]}/{name}.sdm", LEVEL, self.stamp(self.created[i]),
                 self.steps_of(i) * len(names) * self.nbytes(i, g))
                for i in range(self.count) for g, (name, _, names) in enumerate(GROUPS)]

    def attributes(self) -> list[tuple[Any, ...]]:
        from sdm.catalog.values import encode

        out = []
        for i in range(self.count):
            out += [(i + 1, None, None, key, *encode(key, value)) for key, value in run_attributes(i).items()]
            for g, j, key, value in _lower_attributes(i):
                out.append((i + 1, self.group_id(i, g), None if j is None else self.dataset_id(i, g, j), key,
                            *encode(key, value)))
        return out

    def writes(self) -> Iterator[tuple[Any, ...]]:
        """The write rows, run by run (``steps * 10`` per run)."""
        rng = self.rng
        for i in range(self.count):
            nprocs, steps = self.nprocs[i], self.steps_of(i)
            times = [self.stamp(self.created[i] + timedelta(minutes=k + 1)) for k in range(steps)]
            for g, (_, _, names) in enumerate(GROUPS):
                nbytes = self.nbytes(i, g)
                method = METHODS[self.methods[i][g]]
                reason = f"auto: {method} predicted fastest for this layout"
                count = steps * len(names)
                hexes = rng.bytes(8 * count).hex()
                noise = (nbytes / 1e9 * np.exp(rng.normal(0.0, 0.3, count))).tolist()
                file_id = self.group_id(i, g)
                first = self.dataset_id(i, g, 0)
                n = 0
                for k in range(steps):
                    for j in range(len(names)):
                        yield (first + j, STEP_EVERY * k, file_id, n * nbytes, nbytes, hexes[16 * n:16 * n + 16],
                               "mix64-v2", method, reason, noise[n], nprocs, times[k], 1)
                        n += 1


#: The columns each table is filled with (others must be nullable or have a default).
COLUMNS: dict[str, tuple[str, ...]] = {
    "applications": ("id", "name", "created_at"),
    "runs": ("id", "application_id", "created_at", "nprocs", "problem_size", "root", "dir", "state", "writers"),
    "groups": ("id", "run_id", "name", "level", "position"),
    "datasets": ("id", "group_id", "name", "position", "dtype", "shape", "storage_order", "distribution", "nsteps",
                 "first_step", "last_step", "nbytes_written"),
    "files": ("id", "run_id", "path", "level", "created_at", "alloc_end"),
    "attributes": ("run_id", "group_id", "dataset_id", "key", "value_type", "value_num", "value_str"),
    "writes": ("dataset_id", "step", "file_id", "offset", "nbytes", "checksum", "checksum_algo", "method",
               "reason", "seconds", "nprocs", "written_at", "version"),
}


def _check_schema() -> list[str]:
    """Refuse a schema with columns populate cannot leave empty; return the tables it leaves empty."""
    from sdm.catalog import schema as S

    for name, cols in COLUMNS.items():
        table = S.metadata.tables[name]
        missing = [c.name for c in table.columns if c.name not in cols and not c.nullable and not c.primary_key
                   and c.server_default is None and c.default is None]
        unknown = [c for c in cols if c not in table.columns]
        if missing or unknown:
            raise RuntimeError(f"populate does not match the catalog schema: table {name} needs {missing}, "
                               f"has no {unknown}; update benchmarks/_catalog_populate.py")
    return sorted(set(S.metadata.tables) - set(COLUMNS) - {"catalog_info"})


def _sources(rows: _Rows) -> list[tuple[str, Callable[[], Any]]]:
    return [("applications", rows.applications), ("runs", rows.runs), ("groups", rows.groups),
            ("datasets", rows.datasets), ("files", rows.files), ("attributes", rows.attributes),
            ("writes", rows.writes)]


def _chunks(items: Any, size: int) -> Iterator[list[tuple[Any, ...]]]:
    batch: list[tuple[Any, ...]] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


# ----------------------------------------------------------------------------- engines
def _quoted(cols: tuple[str, ...]) -> str:
    """A column list with every name quoted (``offset`` is a keyword)."""
    return ", ".join(f'"{c}"' for c in cols)


def _sqlite_stamp(when: datetime) -> str:
    """The text SQLAlchemy stores on SQLite for a (UTC) datetime."""
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")


def _pg_stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S.%f+00")


def _fill_sqlite(path: Path, rows: _Rows, progress: Callable[[str, int], None] | None) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=OFF")  # a populate-only connection on a file nobody else uses yet
        con.execute("PRAGMA synchronous=OFF")
        con.execute("PRAGMA cache_size=-262144")  # 256 MiB
        for table, make in _sources(rows):
            cols = COLUMNS[table]
            sql = f"INSERT INTO {table} ({_quoted(cols)}) VALUES ({', '.join('?' * len(cols))})"
            done = 0
            for batch in _chunks(make(), CHUNK):
                con.execute("BEGIN")
                con.executemany(sql, batch)
                con.execute("COMMIT")
                done += len(batch)
                if progress is not None:
                    progress(table, done)
        con.execute("PRAGMA journal_mode=WAL")  # the catalog's mode, kept in the file
    finally:
        con.close()


def _fill_postgresql(engine: Any, rows: _Rows, progress: Callable[[str, int], None] | None) -> None:
    raw = engine.raw_connection()
    try:
        pg = raw.driver_connection
        with pg.cursor() as cur:
            for table, make in _sources(rows):
                cols = COLUMNS[table]
                done = 0
                with cur.copy(f"COPY {table} ({_quoted(cols)}) FROM STDIN") as copy:
                    for batch in _chunks(make(), CHUNK):
                        for row in batch:
                            copy.write_row(row)
                        done += len(batch)
                        if progress is not None:
                            progress(table, done)
                if "id" in cols:  # ids were given: move the table's sequence past them
                    cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                f"(SELECT max(id) FROM {table}))")
        pg.commit()
        pg.autocommit = True
        try:
            with pg.cursor() as cur:
                cur.execute("ANALYZE")
        finally:
            pg.autocommit = False
    finally:
        raw.close()


def populate(url: str, writes: int, *, seed: int = 0, root: str | None = None,
             progress: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    """Fill the empty catalog at *url* with the shape of the module docstring.

    Parameters
    ----------
    url : str
        ``sqlite:///path`` (the file must not exist yet) or ``postgresql://...`` (an
        empty database).
    writes : int
        Write rows to make, a multiple of 10 000.
    seed : int
        Seed of the random parts (checksums, jitter, methods, nprocs, timings).
    root : str, optional
        Data root recorded in the runs (default: the SQLite file's directory, else ``/nonexistent``).
    progress : callable, optional
        Called as ``progress(table, rows_done)`` after every chunk.

    Returns
    -------
    dict
        ``seconds`` the population took, ``rows`` per table, ``steps`` per dataset,
        ``unfilled`` tables of the schema populate leaves empty.

    Raises
    ------
    ValueError
        *writes* is not a multiple of 10 000, or the catalog is not empty.
    RuntimeError
        The schema has columns populate does not know how to fill.
    """
    from sdm.catalog import Catalog
    from sdm.catalog.database import sqlite_path
    from sdm.catalog.catalog import normalize_url

    steps = steps_per_dataset(writes)
    unfilled = _check_schema()
    started = time.perf_counter()
    path = sqlite_path(normalize_url(url))
    if path is not None and path.exists():
        raise ValueError(f"populate makes a new catalog; {path} exists")
    cat = Catalog(url)  # SDM's own schema
    try:
        if cat.counts()["runs"]:
            raise ValueError(f"catalog {cat.url} is not empty")
        data_root = root or (str(path.parent / "data") if path is not None else "/nonexistent")
        if path is not None:
            cat.close()
            _fill_sqlite(path, _Rows(writes, seed, data_root, _sqlite_stamp), progress)
        else:
            _fill_postgresql(cat.engine, _Rows(writes, seed, data_root, _pg_stamp), progress)
        counts = cat.counts()
    finally:
        cat.close()
    probe = PROBE_STEPS * DATASETS_PER_RUN
    if counts["writes"] != writes + probe or counts["runs"] != RUNS + 1:
        raise RuntimeError(f"populate made {counts} instead of {writes} + {probe} writes in {RUNS} + 1 runs")
    return {"seconds": time.perf_counter() - started, "rows": counts, "steps": steps, "unfilled": unfilled,
            "seed": seed}


def expected_runs(application: int, match: Callable[[dict[str, Any]], bool]) -> list[int]:
    """Ids of the runs of ``APPS[application]`` whose run-level attributes satisfy *match*, oldest first."""
    return [i + 1 for i in range(application, RUNS, 4) if match(run_attributes(i))]
