"""The archive tier on a real S3 server: SRB-OL's remote methods, migrate throughput, the remote model.

Run from the repository with plain Python; it starts one versitygw and one toxiproxy
(``tests/integration/s3server.py``, 127.0.0.1 only, both stopped at the end whatever
happens) and the MPI jobs it needs (``mpiexec -n 4 python archive.py --worker ...``)::

    PYTHONPATH=src python benchmarks/archive.py                    # 5 rounds, about 5 minutes on 2 cores
    PYTHONPATH=src python benchmarks/archive.py --repeat 7 --only block,noncontig
    PYTHONPATH=src python benchmarks/archive.py --quick --out /tmp/r   # tiny sizes, 1 round (smoke test)

Remote reads go through a toxiproxy proxy in front of the server with a ``latency`` toxic
of ``--latency`` ms (20) on the downstream: every response is that much late (a WAN or
cloud object store's per-request latency).  Migrations and plain copies go to the server
directly.  Every case interleaves its contenders (their order rotates from round to
round), ``--repeat`` rounds; each figure is the median with min-max over the rounds, a
ratio is taken within a round first.  A read is timed from a barrier to its return on the
slowest rank, every read is compared byte for byte with the numpy array written.

Cases (:data:`CASES`, run in this order; ``--only`` picks some):

``block``
    The paper's (Block, Block) pattern: a 1024x1024 array of 1-byte elements (``u1``)
    written by 4 ranks (level 3), migrated, its fast copy purged, read on 4 ranks with
    view ``Block(grid=(2, 2))`` by ``remote-naive`` (one GET per row of a rank's block,
    one after another), ``remote-sieving``, ``remote-collective`` and ``remote-subfile``
    (first read with an empty cache, then a second read served by the cache).  Goal:
    naive / collective >= 30 (the paper measured 39).
``noncontig``
    Small noncontiguous reads: a 1024x64 ``u1`` array read with ``Cyclic(grid=(4, 1))``:
    every rank needs 256 rows of 64 bytes spread over the whole array.
    ``remote-sieving`` (and ``remote-collective``) against ``remote-naive``.
``migrate``
    :func:`sdm.ops.tiers.migrate` of a run of 4 files of 64 MiB against a plain client
    copy of the same files (:meth:`ObjectStore.put_file` of each, no verification) to the
    same server, with ``verify="read-back"`` (the default: every object read back and
    compared byte for byte with its file) and ``verify="upload"`` (the server's check of each signed upload's
    SHA-256 trusted); between rounds the archive copies are purged (untimed).  Goal: plain /
    migrate time (migrate's throughput relative to the plain copy) >= 0.9.
``write``
    Writes to the archive tier: 4 ranks write a 64 MiB float64 array (Block rows) into a
    group made with ``tier="archive"`` (aggregators upload its parts), against a level-1
    write on the fast tier followed by ``sdm migrate`` of that run, and against a plain
    client upload (``ObjectStore.put_file``) of the same bytes, to the server directly.
    No goal in the issue: the ratios say what writing to the archive costs.
``predicted``
    ``sdm calibrate s3://...`` through the proxy, then the remote model's prediction
    (:func:`sdm.planner.remote.predict_remote`) of each method of ``block`` and
    ``noncontig`` beside its measured median.

A new case is a function ``case(bench) -> dict`` added to :data:`CASES` (see
:class:`Bench` for what it gets and :func:`contenders_result` for what it returns); a
superfile case (10-100 small datasets, one object each vs one superfile) fits there.

Writes ``archive.json`` (compact, floats to 4 significant digits), ``archive.md`` and
``archive.png`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
from _io_bench import RESULTS  # noqa: E402
from _mpijob import mpiexec, run_job, worker_env  # noqa: E402

APP = "archive-bench"
BUCKET = "sdm-bench"
RANKS = 4
MiB = 1 << 20

#: The read cases: group, shape, the view (as the worker builds it and as the predictor names it), methods.
READS: dict[str, dict[str, Any]] = {
    "block": {"group": "bb", "shape": (1024, 1024), "quick": (64, 64), "view": "block:2x2",
              "methods": ["remote-naive", "remote-sieving", "remote-collective", "remote-subfile"]},
    "noncontig": {"group": "nc", "shape": (1024, 64), "quick": (64, 16), "view": "cyclic:4x1",
                  "methods": ["remote-naive", "remote-sieving", "remote-collective"]},
}
DTYPE = "u1"


# ----------------------------------------------------------------------------- worker (MPI)
def reference(shape: tuple[int, ...], salt: int) -> np.ndarray:
    """The global array a read case writes (a pure function of its shape and *salt*)."""
    n = int(np.prod(shape))
    return ((np.arange(n, dtype=np.int64) * 131 + salt * 7) % 251).astype(DTYPE).reshape(shape)


def _view(text: str) -> Any:
    import sdm

    kind, _, grid = text.partition(":")
    dims = [int(g) for g in grid.split("x")]
    return sdm.Block(grid=dims) if kind == "block" else sdm.Cyclic(grid=dims)


def _cases(quick: bool) -> list[tuple[str, dict[str, Any], tuple[int, ...]]]:
    return [(name, c, tuple(c["quick"] if quick else c["shape"])) for name, c in READS.items()]


def _local(view: Any, shape: tuple[int, ...], comm: Any, salt: int) -> np.ndarray:
    """This rank's piece of the reference array under *view*."""
    piece = view.piece(shape, comm.size, comm.rank)
    return np.ascontiguousarray(reference(shape, salt)[np.ix_(*piece.indices)])


def worker_write(args: argparse.Namespace) -> None:
    """Write every read case's array at level 3 on all ranks with the case's view; rank 0 prints the run id."""
    from mpi4py import MPI

    import sdm

    comm = MPI.COMM_WORLD
    with sdm.open(APP, root=args.root, catalog=args.catalog) as s:
        for salt, (name, case, shape) in enumerate(_cases(args.quick)):
            g = s.make_group(case["group"], [sdm.Dataset("a", dtype=DTYPE)], shape=shape, level=3)
            view = _view(case["view"])
            g.data_view(view, ["a"])
            g.write("a", 0, _local(view, shape, comm, salt))
        run_id = s.run_id
    if comm.rank == 0:
        print(json.dumps({"run": run_id}), flush=True)


def _timed_read(comm: Any, g: Any, method: str, want: np.ndarray) -> float:
    """Seconds of one read on the slowest rank; the bytes checked against *want*."""
    from mpi4py import MPI

    comm.Barrier()
    t0 = time.perf_counter()
    got = g.read("a", 0, method=method)
    seconds = time.perf_counter() - t0
    if got.tobytes() != want.tobytes():
        raise SystemExit(f"rank {comm.rank}: {method} read other bytes than were written")
    return float(comm.allreduce(seconds, op=MPI.MAX))


def worker_read(args: argparse.Namespace) -> None:
    """One read case, ``--repeat`` rounds of every method (order rotated); rank 0 prints the samples as JSON."""
    from mpi4py import MPI

    import sdm
    from sdm.io import remote

    comm = MPI.COMM_WORLD
    salt = list(READS).index(args.case)
    name, case, shape = _cases(args.quick)[salt]
    methods = list(case["methods"])
    samples: dict[str, list[float]] = {}
    with sdm.open(APP, "r", root=args.root, catalog=args.catalog, run=args.run) as s:
        g = s.group(case["group"])
        view = _view(case["view"])
        g.data_view(view, ["a"])
        want = _local(view, shape, comm, salt)
        cache = Path(args.root) / s.run_dir
        _timed_read(comm, g, "remote-sieving", want)  # untimed warm-up: connections made, catalog cached
        for r in range(args.repeat):
            for method in methods[r % len(methods):] + methods[:r % len(methods)]:
                if method != "remote-subfile":
                    samples.setdefault(method, []).append(_timed_read(comm, g, method, want))
                    continue
                if comm.rank == 0:
                    remote.clear_cache(cache)
                comm.Barrier()
                samples.setdefault("remote-subfile first", []).append(_timed_read(comm, g, method, want))
                samples.setdefault("remote-subfile second", []).append(_timed_read(comm, g, method, want))
    if comm.rank == 0:
        print(json.dumps(samples), flush=True)


SMALL_BYTES = 1024  # each small dataset of the superfile case: 128 float64


def _small(step: int) -> np.ndarray:
    return np.arange(SMALL_BYTES // 8, dtype="<f8") + 1000.0 * step


def worker_small_write(args: argparse.Namespace) -> None:
    """The superfile case's run: ``--files`` steps of a 1 KiB level-1 dataset, one file each (1 rank)."""
    import sdm

    with sdm.open(APP, root=args.root, catalog=args.catalog, attributes={"case": "small"}) as s:
        g = s.make_group("small", ["d"], dtype="<f8", shape=(SMALL_BYTES // 8,), level=1)
        for step in range(args.files):
            g.write("d", step, _small(step))
        run = s.run_id
    print(json.dumps({"run": run}), flush=True)


def worker_small_read(args: argparse.Namespace) -> None:
    """Every dataset of two runs of the superfile case, one object per file vs one superfile, ``--repeat``
    rounds, each from a cold start (the superfile is fetched again); prints the samples as JSON."""
    import sdm
    from sdm.io import remote

    runs = {"one object per file": args.run, "superfile": args.run_b}
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.repeat + 1):  # round 0: untimed warm-up (connections, catalog)
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            remote.forget_superfiles()
            with sdm.open(APP, "r", root=args.root, catalog=args.catalog, run=runs[name]) as s:
                g = s.group("small")
                t0 = time.perf_counter()
                for step in range(args.files):
                    if not np.array_equal(g.read("d", step, verify=True), _small(step)):
                        raise SystemExit(f"{name}: step {step} differs from what was written")
                if r:
                    samples[name].append(time.perf_counter() - t0)
    print(json.dumps(samples), flush=True)


WRITE_COLUMNS = 1024  # the write case's array: (rows, 1024) float64, Block rows over the ranks


def _write_rows(rows: int, size: int, rank: int) -> np.ndarray:
    """This rank's rows of the write case's array (a pure function of the shape)."""
    lo, hi = rank * rows // size, (rank + 1) * rows // size
    return (np.arange(lo * WRITE_COLUMNS, hi * WRITE_COLUMNS, dtype=np.int64) % 1009).astype("<f8").reshape(
        hi - lo, WRITE_COLUMNS)


def worker_archive_write(args: argparse.Namespace) -> None:
    """The write case, every contender in one job, ``--repeat`` rounds (order rotated, round 0 untimed):

    ``archive write``: one ``write`` of a group with ``tier="archive"`` (aggregators upload the parts);
    ``fast write + migrate``: a level-1 write on the fast tier, the session closed, then rank 0's
    ``tiers.migrate`` of that run; ``plain upload``: rank 0's ``ObjectStore.put_file`` of a file holding
    the same bytes.  Timed from a barrier to the slowest rank's return; rank 0 prints the samples as JSON.
    """
    from mpi4py import MPI

    import sdm
    from sdm.catalog import Catalog
    from sdm.ops import tiers
    from sdm.storage.backends.objectstore import ObjectStore

    comm = MPI.COMM_WORLD
    rows = args.files  # rows of the array
    local = _write_rows(rows, comm.size, comm.rank)
    archive = f"s3://{BUCKET}/writes"
    plain = Path(args.root) / "plain.bin"
    store = ObjectStore(archive)
    if comm.rank == 0:
        plain.parent.mkdir(parents=True, exist_ok=True)
        plain.write_bytes(_write_rows(rows, 1, 0).tobytes())
    comm.Barrier()
    contenders = ["archive write", "fast write + migrate", "plain upload"]
    samples: dict[str, list[float]] = {c: [] for c in contenders}
    with sdm.open(APP, root=args.root, catalog=args.catalog, attributes={"case": "write"}) as s:
        g = s.make_group("w", [sdm.Dataset("x", dtype="<f8")], shape=(rows, WRITE_COLUMNS), tier="archive",
                         archive=archive)
        g.data_view(sdm.Block(grid=[comm.size, 1]))
        for r in range(args.repeat + 1):
            for contender in contenders[r % 3:] + contenders[:r % 3]:
                comm.Barrier()
                t0 = time.perf_counter()
                if contender == "archive write":
                    g.write("x", r, local)
                elif contender == "plain upload":
                    if comm.rank == 0:
                        store.put_file(f"plain-{r}", plain)
                else:
                    with sdm.open(APP, root=args.root, catalog=args.catalog) as f:
                        fg = f.make_group("f", [sdm.Dataset("x", dtype="<f8")], shape=(rows, WRITE_COLUMNS), level=1)
                        fg.data_view(sdm.Block(grid=[comm.size, 1]))
                        fg.write("x", 0, local)
                        run_id = f.run_id
                    if comm.rank == 0:
                        cat = Catalog(args.catalog)
                        try:
                            tiers.migrate(cat, run_id, store)
                        finally:
                            cat.close()
                seconds = float(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
                if r:
                    samples[contender].append(seconds)
        if comm.rank == 0:  # the object holds the array's bytes (untimed)
            from sdm.catalog.tiers import copies

            cat = Catalog(args.catalog)
            try:
                (found,) = [c for p, cs in copies(cat, s.run_id).items() for c in cs if p.endswith("s00000001.sdm")]
            finally:
                cat.close()
            if store.get(found.location[len(archive) + 1:]) != plain.read_bytes():
                raise SystemExit("the archive write's object differs from the array")
    if comm.rank == 0:
        print(json.dumps(samples), flush=True)


def case_write(bench: Bench) -> dict[str, Any]:
    """Writes to the archive tier: a group with ``tier="archive"`` against a fast write then migrate, and
    against a plain client upload of the same bytes (4 ranks, the server directly)."""
    rows = 256 if bench.args.quick else 8192  # 2 MiB (one PUT) or 64 MiB (4 parts of 16 MiB)
    samples = bench.job("archive-write", "--files", str(rows))
    nbytes = rows * WRITE_COLUMNS * 8
    out = contenders_result("Writes to the archive tier (4 ranks, Block rows of float64)",
                            {"bytes": nbytes, "ranks": RANKS, "endpoint": "server (no proxy)"}, samples,
                            {"plain upload / archive write (time)": ratio(samples, "plain upload", "archive write"),
                             "fast write + migrate / archive write (time)": ratio(samples, "fast write + migrate",
                                                                                 "archive write")})
    out["throughput_MiBps"] = {c: stats([nbytes / MiB / s for s in v]) for c, v in samples.items()}
    return out


def case_superfile(bench: Bench) -> dict[str, Any]:
    """Many small datasets read from the archive: one object per file against one superfile (1 rank)."""
    from sdm.catalog import Catalog
    from sdm.ops import tiers

    samples: dict[str, list[float]] = {}
    ratios: dict[str, dict[str, Any]] = {}
    counts = (10,) if bench.args.quick else (10, 100)
    for files in counts:
        runs = [int(bench.job("small-write", "--files", str(files), ranks=1)["run"]) for _ in range(2)]
        cat = Catalog(bench.catalog)
        try:
            for run_id, pack_below in zip(runs, (0, SMALL_BYTES * 4)):
                tiers.migrate(cat, run_id, bench.store(f"small-{files}-{pack_below}"), pack_below=pack_below)
                tiers.purge(cat, run_id, "fast")
        finally:
            cat.close()
        got = bench.job("small-read", "--files", str(files), "--run", str(runs[0]), "--run-b", str(runs[1]),
                        ranks=1, endpoint=bench.proxy.endpoint)
        for name, values in got.items():
            samples[f"{files} files: {name}"] = values
        ratios[f"{files} files: one object per file / superfile"] = ratio(
            samples, f"{files} files: one object per file", f"{files} files: superfile", 8.0)
    return contenders_result("Small datasets read from the archive: one object per file vs one superfile (1 rank)",
                             {"files": list(counts), "dataset_bytes": SMALL_BYTES, "latency_ms": bench.args.latency},
                             samples, ratios)


# ----------------------------------------------------------------------------- driver
def stats(values: list[float]) -> dict[str, float]:
    """Median, min, max and count of *values*."""
    return {"median": median(values), "min": min(values), "max": max(values), "n": len(values)}


def ratio(samples: dict[str, list[float]], num: str, den: str, goal: float | None = None) -> dict[str, Any]:
    """``num / den`` within each round, then its stats (and the goal, when there is one, and whether it is met)."""
    values = [a / b for a, b in zip(samples[num], samples[den])]
    out: dict[str, Any] = {"of": [num, den], **stats(values)}
    if goal is not None:
        out.update(goal=goal, met=out["median"] >= goal)
    return out


def contenders_result(title: str, params: dict[str, Any], samples: dict[str, list[float]],
                      ratios: dict[str, dict[str, Any]], unit: str = "s") -> dict[str, Any]:
    """What a case returns: its title, parameters, every sample, stats per contender and ratios."""
    return {"title": title, "params": params, "unit": unit, "samples": samples,
            "stats": {c: stats(v) for c, v in samples.items()}, "ratios": ratios}


@dataclass
class Bench:
    """What a case gets: options, the scratch directory, the servers and the results so far."""

    args: argparse.Namespace
    base: Path
    s3: Any
    proxy: Any
    results: dict[str, Any] = field(default_factory=dict)
    read_run: int | None = None

    @property
    def catalog(self) -> str:
        return f"sqlite:///{self.base}/catalog.db"

    @property
    def root(self) -> Path:
        return self.base / "root"

    def env(self, endpoint: str) -> dict[str, str]:
        """A worker's environment: this checkout's sources, the S3 credentials and *endpoint*."""
        return {**worker_env(), **self.s3.env(endpoint), "SDM_S3_ENDPOINT": endpoint}

    def store(self, prefix: str, endpoint: str | None = None) -> Any:
        """An :class:`ObjectStore` under ``s3://BUCKET/PREFIX`` (the server directly unless *endpoint*)."""
        from sdm.storage.backends.objectstore import ObjectStore

        store = ObjectStore(f"s3://{BUCKET}/{prefix}", endpoint=endpoint or self.s3.endpoint)
        store.ensure_bucket()
        return store

    def job(self, mode: str, *extra: str, endpoint: str | None = None, ranks: int = RANKS) -> dict[str, Any]:
        """Run the worker *mode* on *ranks* ranks; the JSON its rank 0 printed last."""
        command = [mpiexec(), "-n", str(ranks), sys.executable, str(Path(__file__).resolve()), "--worker", mode,
                   "--root", str(self.root), "--catalog", self.catalog, "--repeat", str(self.args.repeat),
                   *(["--quick"] if self.args.quick else []), *extra]
        return dict(json.loads(run_job(command, self.env(endpoint or self.s3.endpoint), self.args.timeout)))

    def archived_reads(self) -> int:
        """The run of the read cases: written on 4 ranks, migrated to the server, its fast copy purged (once)."""
        if self.read_run is None:
            from sdm.catalog import Catalog
            from sdm.ops import tiers

            run_id = int(self.job("write")["run"])
            cat = Catalog(self.catalog)
            try:
                tiers.migrate(cat, run_id, self.store("reads"))
                tiers.purge(cat, run_id, "fast")
            finally:
                cat.close()
            self.read_run = run_id
        return self.read_run


# ----------------------------------------------------------------------------- cases
def _read_case(bench: Bench, name: str, title: str, ratios: list[tuple[str, str, str, float | None]]
               ) -> dict[str, Any]:
    case = READS[name]
    shape = case["quick"] if bench.args.quick else case["shape"]
    run_id = bench.archived_reads()
    samples = bench.job("read", "--case", name, "--run", str(run_id), endpoint=bench.proxy.endpoint)
    params = {"shape": list(shape), "dtype": DTYPE, "ranks": RANKS, "view": case["view"],
              "dataset_bytes": int(np.prod(shape)), "latency_ms": bench.args.latency}
    return contenders_result(title, params, samples,
                             {label: ratio(samples, a, b, goal) for label, a, b, goal in ratios})


def case_block(bench: Bench) -> dict[str, Any]:
    """The paper's (Block, Block) read: remote naive, sieving, collective and subfile through the proxy."""
    return _read_case(bench, "block", "(Block, Block) of 1-byte elements on 4 ranks",
                      [("naive / collective", "remote-naive", "remote-collective", 30.0),
                       ("naive / sieving", "remote-naive", "remote-sieving", None),
                       ("naive / subfile first", "remote-naive", "remote-subfile first", None),
                       ("naive / subfile second", "remote-naive", "remote-subfile second", None)])


def case_noncontig(bench: Bench) -> dict[str, Any]:
    """Small noncontiguous reads (cyclic rows): remote sieving (and collective) against naive."""
    return _read_case(bench, "noncontig", "Cyclic rows of a 1-byte array on 4 ranks (small regions over a span)",
                      [("naive / sieving", "remote-naive", "remote-sieving", None),
                       ("naive / collective", "remote-naive", "remote-collective", None)])


def _migrate_run(bench: Bench, files: int, per_file: int) -> tuple[int, list[Path], list[str]]:
    """A run of *files* level-3 files of *per_file* bytes (random float64); its id, paths and object keys."""
    import sdm
    from sdm.catalog import Catalog

    rng = np.random.default_rng(19)
    with sdm.open(APP, root=str(bench.root), catalog=bench.catalog) as s:
        for i in range(files):
            g = s.make_group(f"m{i}", [sdm.Dataset("x", dtype="<f8")], shape=(per_file // 8,), level=3)
            g.write("x", 0, rng.random(per_file // 8))
        run_id = s.run_id
    from sdm.catalog.tiers import copies

    cat = Catalog(bench.catalog)
    try:
        keys = sorted(copies(cat, run_id))
    finally:
        cat.close()
    return run_id, [bench.root / k for k in keys], keys


def case_migrate(bench: Bench) -> dict[str, Any]:
    """``tiers.migrate`` of a run against a plain ``put_file`` of its files, to the server directly."""
    from sdm.catalog import Catalog
    from sdm.ops import tiers

    files, per_file = (4, 1 * MiB) if bench.args.quick else (4, 64 * MiB)
    run_id, paths, keys = _migrate_run(bench, files, per_file)
    total = sum(p.stat().st_size for p in paths)
    samples: dict[str, list[float]] = {"migrate": [], "migrate-upload": [], "plain": []}
    parts: dict[str, list[float]] = {}
    cat = Catalog(bench.catalog)
    try:
        for r in range(bench.args.repeat):
            order = list(samples)
            for contender in order[r % 3:] + order[:r % 3]:  # rotated from round to round
                store = bench.store(f"{contender}-{r}")
                t0 = time.perf_counter()
                if contender.startswith("migrate"):
                    tiers.migrate(cat, run_id, store, verify="upload" if contender == "migrate-upload" else "read-back")
                else:
                    for path, key in zip(paths, keys):
                        store.put_file(key, path)
                samples[contender].append(time.perf_counter() - t0)
                if contender.startswith("migrate"):  # untimed: the archive copies go, so the next round copies again
                    tiers.purge(cat, run_id, "archive", store)
                else:  # what migrate does beyond the copy, each part alone (untimed in the contest)
                    for part, seconds in _migrate_parts(cat, run_id, store, paths, keys).items():
                        parts.setdefault(part, []).append(seconds)
                    for key in keys:
                        store.delete(key)
    finally:
        cat.close()
    params = {"files": files, "bytes": total, "part_size": MiB * 8, "endpoint": "server (no proxy)"}
    out = contenders_result("Migrate vs a plain client copy of the same files", params, samples,
                            {"plain / migrate (time)": ratio(samples, "plain", "migrate", 0.9),
                             "plain / migrate --verify upload (time)": ratio(samples, "plain", "migrate-upload", 0.9)})
    out["throughput_MiBps"] = {c: stats([total / MiB / s for s in v]) for c, v in samples.items()}
    out["migrate_parts"] = {part: stats(v) for part, v in parts.items()}
    return out


def _migrate_parts(cat: Any, run_id: int, store: Any, paths: list[Path], keys: list[str]) -> dict[str, float]:
    """Seconds of each check :func:`tiers.migrate` makes besides the upload, on the files just copied by *store*."""
    from sdm.ops import tiers
    from sdm.storage.digests import file_digest

    sizes = [p.stat().st_size for p in paths]
    steps: dict[str, Callable[[], Any]] = {
        "row checksums (local file)": lambda: [tiers._check_rows(cat, run_id, k, p) for k, p in zip(keys, paths)],
        "SHA-256 (local file)": lambda: [file_digest(p) for p in paths],
        "read-back (GET + byte comparison)": lambda: [tiers._same_object(store, k, p, n)
                                                      for k, p, n in zip(keys, paths, sizes)],
    }
    out = {}
    for part, step in steps.items():
        t0 = time.perf_counter()
        step()
        out[part] = time.perf_counter() - t0
    return out


def _calibrate(bench: Bench) -> dict[str, Any]:
    """``sdm calibrate s3://BUCKET/calibration`` through the proxy (the CLI, ``--json``); its output."""
    command = [sys.executable, "-m", "sdm", "calibrate", f"s3://{BUCKET}/calibration", "--catalog", bench.catalog,
               "--endpoint", bench.proxy.endpoint, "--json", *(["--quick"] if bench.args.quick else [])]
    proc = subprocess.run(command, env=bench.env(bench.proxy.endpoint), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=bench.args.timeout)
    if proc.returncode != 0:
        raise SystemExit(f"sdm calibrate failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout))


def case_predicted(bench: Bench) -> dict[str, Any]:
    """The remote model's prediction, with constants calibrated through the proxy, beside each measured median."""
    from sdm.planner.remote import RemoteConstants, RemoteWorkload, predict_remote

    calibration = _calibrate(bench)
    constants = RemoteConstants.from_json(calibration["constants"])
    rows = []
    for name, case in READS.items():
        measured = bench.results.get(name)
        if measured is None:
            continue
        shape = tuple(case["quick"] if bench.args.quick else case["shape"])
        work = RemoteWorkload(shape, DTYPE, RANKS, case["view"])
        once, twice = (predict_remote(work, constants, {"frequency": f}).costs for f in (1, 2))
        for contender, st in measured["stats"].items():
            method = contender.removeprefix("remote-").split()[0]
            seconds = twice[method].seconds - once[method].seconds if contender.endswith("second") \
                else once[method].seconds
            rows.append({"case": name, "method": contender, "predicted": seconds, "measured": st["median"],
                         "requests": once[method].requests, "measured/predicted": st["median"] / seconds
                         if seconds > 0 else None})
    return {"title": "Predicted (sdm calibrate through the proxy) vs measured", "constants": calibration["constants"],
            "target": calibration["target"], "rows": rows}


#: The cases in the order they run: name -> function.  Reads first (``predicted`` uses their medians).
CASES: dict[str, Callable[[Bench], dict[str, Any]]] = {
    "block": case_block,
    "noncontig": case_noncontig,
    "migrate": case_migrate,
    "superfile": case_superfile,
    "write": case_write,
    "predicted": case_predicted,
}


# ----------------------------------------------------------------------------- report
def _sec(x: float) -> str:
    return f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.2f} s"


def _fmt(s: dict[str, float]) -> str:
    return f"{_sec(s['median'])} ({_sec(s['min'])} - {_sec(s['max'])})"


def _ratio_lines(result: dict[str, Any]) -> list[str]:
    lines = ["", "| ratio | median (min-max) | goal |", "|---|---|---|"]
    for label, r in result["ratios"].items():
        goal = f">= {r['goal']:g}: {'met' if r['met'] else 'NOT met'}" if "goal" in r else ""
        lines.append(f"| {label} | {r['median']:.3g} ({r['min']:.3g} - {r['max']:.3g}) | {goal} |")
    return lines


def markdown(data: dict[str, Any]) -> str:
    """The report: circumstances, one table per case, the ratios and the predictions."""
    m = data["meta"]
    lines = ["# Archive tier: remote reads, migrate and the remote model on versitygw", "",
             f"SDM {m['sdm_version']} ({m['git_commit']}), {m['cores']} cores, Python {m['python']}, {m['date']}, "
             f"load average {m['load_before']:.2f} before, {m['load_after']:.2f} after; {data['repeat']} "
             f"interleaved rounds; medians (min - max). {data['setup']}", ""]
    for name, result in data["cases"].items():
        if name == "predicted":
            continue
        p = result["params"]
        lines += [f"## {name}: {result['title']}", "", "`" + json.dumps(p, separators=(", ", ": ")) + "`", "",
                  "| contender | seconds |", "|---|---|"]
        lines += [f"| {c} | {_fmt(s)} |" for c, s in result["stats"].items()]
        if "throughput_MiBps" in result:
            lines += ["", "| contender | MiB/s |", "|---|---|"]
            lines += [f"| {c} | {s['median']:.0f} ({s['min']:.0f} - {s['max']:.0f}) |"
                      for c, s in result["throughput_MiBps"].items()]
        if "migrate_parts" in result:
            lines += ["", "What migrate does besides the upload, each part timed alone after a plain copy:", "",
                      "| part | seconds |", "|---|---|"]
            lines += [f"| {c} | {_fmt(s)} |" for c, s in result["migrate_parts"].items()]
        lines += _ratio_lines(result) + [""]
    if "predicted" in data["cases"]:
        pr = data["cases"]["predicted"]
        consts = ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in pr["constants"].items() if not isinstance(v, list))
        reads = ", ".join(f"{int(b)} B: {t * 1e3:.3g} ms" for b, t in pr["constants"]["T_read"])
        lines += [f"## predicted: {pr['title']}", "", f"Constants of `{pr['target']}`: {consts}; T_read {reads}.",
                  "", "| case | method | predicted | measured | measured / predicted |", "|---|---|---|---|---|"]
        for r in pr["rows"]:
            q = f"{r['measured/predicted']:.3g}" if r["measured/predicted"] is not None else "-"
            lines.append(f"| {r['case']} | {r['method']} | {_sec(r['predicted'])} | {_sec(r['measured'])} | {q} |")
        lines.append("")
    return "\n".join(lines)


def plot(data: dict[str, Any], path: Path) -> None:
    """Medians with min-max bars per contender, one panel per timed case (log scale); a small PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _plots import save_png

    timed = {n: r for n, r in data["cases"].items() if "stats" in r}
    fig, axes = plt.subplots(1, max(len(timed), 1), figsize=(3.0 * max(len(timed), 1), 2.8), squeeze=False)
    predicted = {(r["case"], r["method"]): r["predicted"] for r in data["cases"].get("predicted", {}).get("rows", [])}
    for ax, (name, result) in zip(axes[0], timed.items()):
        names = list(result["stats"])
        med = np.array([result["stats"][c]["median"] for c in names])
        lo = med - np.array([result["stats"][c]["min"] for c in names])
        hi = np.array([result["stats"][c]["max"] for c in names]) - med
        x = np.arange(len(names))
        ax.bar(x, med, yerr=[lo, hi], color="tab:blue", capsize=2)
        pred = [predicted.get((name, c)) for c in names]
        if any(p is not None for p in pred):
            ax.plot(x, [np.nan if p is None else p for p in pred], "r_", markersize=12, label="predicted")
            ax.legend(fontsize=6)
        ax.set_yscale("log")
        ax.set_xticks(x, [c.replace("remote-", "") for c in names], rotation=35, ha="right", fontsize=6)
        ax.tick_params(axis="y", labelsize=6)
        ax.set_title(name, fontsize=8)
        ax.set_ylabel("seconds", fontsize=7)
    fig.tight_layout()
    save_png(fig, path, dpi=70)
    plt.close(fig)


# ----------------------------------------------------------------------------- main
def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the servers, run the cases, stop the servers; the results."""
    from mpi4py import MPI

    from _io_bench import meta
    from s3server import AWS_VARIABLES, S3Server, Toxiproxy

    load = os.getloadavg()[0]
    base = Path(tempfile.mkdtemp(prefix="sdm-archive-bench-"))
    cases: dict[str, Any] = {}
    saved = {name: os.environ.get(name) for name in AWS_VARIABLES}
    try:
        with S3Server() as s3, Toxiproxy() as tp:
            os.environ.update({k: v for k, v in s3.env().items() if k in AWS_VARIABLES})  # this process's clients
            proxy = tp.proxy("s3", s3.address)
            proxy.add_toxic("latency", latency=args.latency)
            bench = Bench(args, base, s3, proxy, cases)
            for name in args.only:
                print(f"case {name} ...", flush=True)
                t0 = time.perf_counter()
                cases[name] = CASES[name](bench)
                print(f"case {name}: {time.perf_counter() - t0:.0f} s", flush=True)
        info = meta(MPI.COMM_SELF, base, load, nprocs=RANKS, seconds=None)
        setup = (f"One versitygw (POSIX backend on {info['fs']}) and one toxiproxy on 127.0.0.1; remote reads "
                 f"through the proxy with a {args.latency} ms latency toxic on every response (downstream), {RANKS} "
                 f"ranks (oversubscribed on {os.cpu_count()} cores); migrations and plain copies to the server "
                 "directly; SQLite catalog; obstore client.")
    finally:
        shutil.rmtree(base, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return {"meta": info, "repeat": args.repeat, "quick": args.quick, "latency_ms": args.latency, "setup": setup,
            "cases": cases}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5, help="interleaved rounds per case (5)")
    p.add_argument("--latency", type=int, default=20, help="ms the proxy adds to every response (20)")
    p.add_argument("--only", default=",".join(CASES), help=f"cases, comma separated ({','.join(CASES)})")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one round (a smoke test, not a measurement)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per MPI job (1800)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--worker", choices=("write", "read", "small-write", "small-read", "archive-write"),
                   help=argparse.SUPPRESS)
    p.add_argument("--files", type=int, help=argparse.SUPPRESS)
    p.add_argument("--run-b", type=int, help=argparse.SUPPRESS)
    p.add_argument("--root", help=argparse.SUPPRESS)
    p.add_argument("--catalog", help=argparse.SUPPRESS)
    p.add_argument("--run", type=int, help=argparse.SUPPRESS)
    p.add_argument("--case", choices=list(READS), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.repeat = 1
    if args.worker == "write":
        worker_write(args)
        return
    if args.worker == "small-write":
        worker_small_write(args)
        return
    if args.worker == "small-read":
        worker_small_read(args)
        return
    if args.worker == "archive-write":
        worker_archive_write(args)
        return
    if args.worker == "read":
        worker_read(args)
        return
    args.only = [c for c in args.only.split(",") if c]
    unknown = [c for c in args.only if c not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; known: {list(CASES)}")
    t0 = time.perf_counter()
    data = run(args)
    data["meta"]["seconds"] = time.perf_counter() - t0
    from _io_bench import write_results
    from sdm.bench import rounded

    data = rounded(data)
    write_results(args.out, "archive", data, markdown(data), lambda path: plot(data, path))


if __name__ == "__main__":
    main()
