"""Property-based fuzzing of the collective API (Hypothesis), on every rank count.

Every rank draws the same calls (``derandomize=True``, no shrinking, and each example's
verdict is agreed by all ranks before Hypothesis sees it, so its choices never diverge).
Rank-divergent calls are built on purpose from the rank: the last rank passes another
step, dataset, array, method or flag. Each call either works -- and then what it wrote is
compared, byte for byte, with an array built independently with numpy and read straight
from the file -- or raises a specific :class:`sdm.SDMError` subclass (never ``SDMError``
itself, never :class:`sdm.InternalError`, never another exception) with the same class and
message on every rank, and leaves the catalog's row counts and the bytes of the data
files as they were.

``SDM_FUZZ_EXAMPLES`` scales the number of examples (default below).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mpi4py import MPI

import sdm
from sdm.errors import InternalError, SDMError

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
SIZE = COMM.Get_size()
LAST = SIZE - 1
EXAMPLES = int(os.environ.get("SDM_FUZZ_EXAMPLES", "150" if SIZE <= 4 else "50"))  # 8 ranks: the time budget

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: every rank runs the same examples
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)

pytestmark = pytest.mark.timeout(600)

CALLS = {"generated": 0, "worked": 0, "refused": 0, "divergent": 0}

# The datasets of the fuzzed run: group -> level, [(name, dtype, shape, order)]
GROUPS = {
    "g3": (3, [("a", "<f8", (6, 4), "C"), ("b", "<i4", (5,), "C")]),
    "g2": (2, [("c", "<f4", (3, 2, 2), "F")]),
    "g1": (1, [("d", "<u1", (7,), "C"), ("z", "<i8", (0, 3), "C")]),
}
METHODS = ["posix", "list", "datatype", "sieving", "collective", "servers", "auto"]


# ------------------------------------------------------------------------- the run
class World:
    """The fuzzed run: a session, its groups, and what each written step must hold."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = f"sqlite:///{root}/catalog.db"
        self.raw = root / "raw.bin"
        self.session = sdm.open("fuzz", root=str(root), catalog=self.url)
        self.groups = {}
        for gname, (level, specs) in GROUPS.items():
            self.groups[gname] = self.session.make_group(
                gname, [sdm.Dataset(n, shape=shp, dtype=dt, order=od) for n, dt, shp, od in specs], level=level
            )
        self.expected: dict[tuple[str, str, int], np.ndarray] = {}
        if RANK == 0:
            np.arange(40, dtype=">f8").tofile(self.raw)
        COMM.Barrier()

    def close(self) -> None:
        self.session.close()

    def spec(self, gname: str, dname: str) -> tuple[str, tuple[int, ...], str]:
        for n, dt, shp, od in GROUPS[gname][1]:
            if n == dname:
                return dt, shp, od
        raise KeyError(dname)

    # rank 0 looks, everybody learns
    def snapshot(self) -> Any:
        if RANK != 0:
            return None
        cat = sdm.Catalog(self.url)
        try:
            counts = cat.counts()
        finally:
            cat.close()
        files = {}
        for p in sorted(self.root.rglob("*.sdm")):
            files[str(p.relative_to(self.root))] = p.read_bytes()
        return counts, files

    def unchanged_since(self, before: Any) -> str:
        """'' when the catalog counts and the data bytes are as *before* (rank 0 decides)."""
        problem = ""
        if RANK == 0:
            counts, files = before
            now_counts, now_files = self.snapshot()
            if now_counts != counts:
                problem = f"catalog rows changed after an error: {counts} -> {now_counts}"
            if now_files != files:  # a refused call reserves nothing and writes nothing
                changed = sorted(p for p in set(files) | set(now_files) if files.get(p) != now_files.get(p))
                problem = problem or f"data files {changed} changed after an error"
        return COMM.bcast(problem)

    def file_holds(self, gname: str, dname: str, step: int, glob: np.ndarray) -> str:
        """'' when the committed row of (dataset, step) holds exactly *glob* (read with numpy by rank 0)."""
        problem = ""
        if RANK == 0:
            cat = sdm.Catalog(self.url)
            try:
                rows = [w for g, d, w in cat.writes(self.session.run_id) if (g, d, w.step) == (gname, dname, step)]
            finally:
                cat.close()
            dt, shp, od = self.spec(gname, dname)
            if len(rows) != 1:
                problem = f"{len(rows)} catalog rows for {gname}/{dname} step {step}"
            else:
                w = rows[0]
                n = int(np.prod(shp))
                with open(self.root / w.path, "rb") as f:
                    f.seek(w.offset)
                    data = np.frombuffer(f.read(n * np.dtype(dt).itemsize), dtype=dt)
                if data.size != n or not np.array_equal(data.reshape(shp, order=od), glob):
                    problem = f"file bytes of {gname}/{dname} step {step} differ from the array written"
        return COMM.bcast(problem)


def global_array(dt: str, shape: tuple[int, ...], step: int, salt: int) -> np.ndarray:
    """The global array of a write, built without SDM."""
    n = int(np.prod(shape))
    return ((np.arange(n, dtype=np.int64) * 7 + step * 13 + salt) % 251).astype(dt).reshape(shape)


def local_of(group: Any, dname: str, glob: np.ndarray, order: str) -> np.ndarray:
    """This rank's local array of *glob* under the group's current view (ghosts zero)."""
    piece = group.piece(dname)
    local = np.zeros(piece.memory_shape, dtype=glob.dtype, order=order)
    local[piece.interior] = glob[np.ix_(*piece.indices)]
    return local


@pytest.fixture(scope="module")
def world():
    root = Path(tempfile.mkdtemp(prefix="sdm-fuzz-")) if RANK == 0 else None
    root = Path(COMM.bcast(str(root) if root else None))
    w = World(root)
    yield w
    w.close()
    COMM.Barrier()
    if RANK == 0:
        shutil.rmtree(root, ignore_errors=True)


class _Summary:
    """Prints the number of generated calls at the end of the session."""

    def pytest_terminal_summary(self, terminalreporter):
        if CALLS["generated"]:
            terminalreporter.write_line(
                f"fuzz (tests/mpi, {SIZE} ranks): {CALLS['generated']} generated calls, {CALLS['worked']} worked, "
                f"{CALLS['refused']} refused with a specific SDMError, {CALLS['divergent']} rank-divergent")


@pytest.fixture(scope="module", autouse=True)
def report(request):
    if not request.config.pluginmanager.has_plugin("sdm-fuzz-mpi"):
        request.config.pluginmanager.register(_Summary(), "sdm-fuzz-mpi")
    yield


# ---------------------------------------------------------------------- verdicts
def attempt(fn: Callable[[], Any]) -> tuple[str, str, str, Any]:
    try:
        return "ok", "", "", fn()
    except SDMError as exc:
        return "err", type(exc).__name__, str(exc), exc
    except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
        return "raw", type(exc).__name__, str(exc), exc


def judge(world: World, what: str, fn: Callable[[], Any], divergent: bool = False) -> tuple[str, Any]:
    """Run one call on every rank and check the rules; returns ("ok", value) or ("err", class name)."""
    CALLS["generated"] += 1
    CALLS["divergent"] += bool(divergent)
    before = world.snapshot()
    kind, cls, msg, value = attempt(fn)
    seen = COMM.allgather((kind, cls, msg))
    problems = []
    if len(set(seen)) > 1:
        problems.append(f"ranks disagree: {seen}")
    kind, cls, msg = seen[0]
    if kind == "raw":
        problems.append(f"a raw {cls} escaped: {msg}")
    if kind == "err" and cls in ("SDMError", InternalError.__name__):
        problems.append(f"not a specific error class: {cls}: {msg}")
    if kind == "err" and not problems:
        changed = world.unchanged_since(before)
        if changed:
            problems.append(changed)
    if problems:
        raise AssertionError(f"{what}: " + "; ".join(problems))
    CALLS["worked" if kind == "ok" else "refused"] += 1
    return (kind, value if kind == "ok" else cls)


def agreed(problem: str, what: str) -> None:
    """Fail on every rank when any rank found a problem."""
    problems = [p for p in COMM.allgather(problem) if p]
    if problems:
        raise AssertionError(f"{what}: {problems[0]}")


# -------------------------------------------------------------------- strategies
# Arguments of the wrong type or value; some odd ones are fine (numpy integers and bools).
BAD_STEPS = st.sampled_from([-1, 2**63, 10**30, True, 1.0, "3", None, np.int64(2), np.uint8(1), np.int32(-3)])
NAMES = st.sampled_from(["a", "b", "c", "d", "z", "nope", "", 3, None, ["a"], "a/../b"])
BAD_METHODS = st.sampled_from([None, "fastest", 5, ["posix"], "", "auto"])
ARRAY_KINDS = st.sampled_from(["dtype", "shape", "list", "str", "none", "fortran", "scalar"])


def corrupt(data: Any, *args: str, valid: int = 3) -> str | None:
    """Which argument of a call gets an odd value (None: all valid) -- the same on every rank."""
    return data.draw(st.sampled_from([None] * valid + list(args)), "corrupt")


def diverge(data: Any, *args: str) -> str | None:
    """Which argument the last rank changes (never on one rank)."""
    if SIZE == 1:
        return None
    return data.draw(st.sampled_from([None] * (3 * len(args)) + list(args)), "diverge")


def make_array(kind: str, good: np.ndarray) -> Any:
    if kind == "right":
        return good
    if kind == "dtype":
        return good.astype("f2" if good.dtype != np.float16 else "f8")
    if kind == "shape":
        return np.zeros(good.shape + (1,), dtype=good.dtype)
    if kind == "list":
        return good.tolist()
    if kind == "str":
        return "abc"
    if kind == "none":
        return None
    if kind == "fortran":
        return np.asfortranarray(good)
    return good.dtype.type(1)


def dataset_of(data: Any) -> tuple[str, str]:
    gname = data.draw(st.sampled_from(sorted(GROUPS)), "group")
    dname = data.draw(st.sampled_from([n for n, *_ in GROUPS[gname][1]]), "dataset")
    return gname, dname


def valid_step(step: Any) -> bool:
    return isinstance(step, (int, np.integer)) and not isinstance(step, (bool, np.bool_)) and 0 <= int(step) < 2**63


# ------------------------------------------------------------------------- calls
def do_write(world: World, data: Any) -> None:
    gname, dname = dataset_of(data)
    g = world.groups[gname]
    dt, shp, od = world.spec(gname, dname)
    bad = corrupt(data, "step", "array", "name", "overwrite", "method", valid=5)
    step = data.draw(BAD_STEPS if bad == "step" else st.integers(0, 5), "step")
    kind = data.draw(ARRAY_KINDS, "array") if bad == "array" else "right"
    name = data.draw(NAMES, "name") if bad == "name" else dname
    overwrite = data.draw(st.sampled_from([1, "no", None, np.bool_(True)]) if bad == "overwrite" else st.booleans(), "ow")
    method = data.draw(BAD_METHODS if bad == "method" else st.sampled_from([None] * 3 + METHODS), "method")
    salt = data.draw(st.integers(0, 9), "salt")
    divergent = diverge(data, "step", "array", "name", "method", "overwrite")
    glob = global_array(dt, shp, int(step) if valid_step(step) else 0, salt)
    array = make_array(kind, local_of(g, dname, glob, od))
    if divergent and RANK == LAST:
        if divergent == "step":
            step = int(step) + 1 if valid_step(step) else 1
        elif divergent == "array":
            array = make_array("shape", local_of(g, dname, glob, od))
        elif divergent == "name":
            name = "b" if name != "b" else "a"
        elif divergent == "method":
            method = "posix" if method != "posix" else "list"
        else:
            overwrite = not overwrite if isinstance(overwrite, (bool, np.bool_)) else True
    what = f"write({name!r}, {step!r}, <{kind}>, overwrite={overwrite!r}, method={method!r}, divergent={divergent})"
    kind_, _ = judge(world, what, lambda: g.write(name, step, array, overwrite=overwrite, method=method), bool(divergent))
    if kind_ == "ok":
        world.expected[(gname, name, int(step))] = glob
        agreed(world.file_holds(gname, name, int(step), glob), what)


def do_write_step(world: World, data: Any) -> None:
    gname = data.draw(st.sampled_from(sorted(GROUPS)), "group")
    g = world.groups[gname]
    names = [n for n, *_ in GROUPS[gname][1]]
    step = data.draw(st.integers(0, 5), "step")
    overwrite = data.draw(st.booleans(), "overwrite")
    shape = data.draw(st.sampled_from(["all"] * 4 + ["dict-of-one", "list", "str", "empty", "extra", "bad-array"]), "arrays")
    globs = {n: global_array(world.spec(gname, n)[0], world.spec(gname, n)[1], step, 5) for n in names}
    arrays: Any = {n: local_of(g, n, globs[n], world.spec(gname, n)[2]) for n in names}
    if shape == "dict-of-one":
        arrays = {names[0]: arrays[names[0]]}
    elif shape == "list":
        arrays = list(arrays.values())
    elif shape == "str":
        arrays = "abc"
    elif shape == "empty":
        arrays = {}
    elif shape == "extra":
        arrays = {**arrays, "nope": np.zeros(1)}
    elif shape == "bad-array":
        arrays = {n: "x" for n in arrays}
    divergent = SIZE > 1 and isinstance(arrays, dict) and data.draw(st.sampled_from([False, False, True]), "div")
    if divergent and RANK == LAST:
        arrays = dict(reversed(list(arrays.items()))) if len(arrays) > 1 else {**arrays, "b": np.zeros(1)}
    what = f"write_step({step}, <{shape}>, overwrite={overwrite}, divergent={divergent})"
    kind, _ = judge(world, what, lambda: g.write_step(step, arrays, overwrite=overwrite), divergent)
    if kind == "ok":
        for n in arrays:
            world.expected[(gname, n, step)] = globs[n]
            agreed(world.file_holds(gname, n, step, globs[n]), what)


def do_read(world: World, data: Any) -> None:
    gname, dname = dataset_of(data)
    g = world.groups[gname]
    dt, shp, od = world.spec(gname, dname)
    written = sorted(s for (gn, dn, s) in world.expected if (gn, dn) == (gname, dname))
    bad = corrupt(data, "step", "name", "out", "verify", "method", valid=5)
    if bad == "step" or not written:
        step = data.draw(BAD_STEPS, "step")
    else:
        step = data.draw(st.sampled_from(written), "step")
    name = data.draw(NAMES, "name") if bad == "name" else dname
    out_kind = data.draw(st.sampled_from(["dtype", "shape", "list", "readonly"]) if bad == "out"
                         else st.sampled_from(["none", "right"]), "out")
    verify = data.draw(st.sampled_from([1, "yes", np.bool_(True)]) if bad == "verify" else st.sampled_from([None, True, False]), "v")
    method = data.draw(BAD_METHODS if bad == "method" else st.sampled_from([None] * 3 + METHODS), "method")
    divergent = diverge(data, "step", "name", "verify")
    piece = g.piece(dname)
    out: Any = None
    if out_kind != "none":
        good = np.zeros(piece.memory_shape, dtype=dt, order=od)
        out = {"right": good, "dtype": good.astype("f2") if dt != "<f2" else good.astype("f8"),
               "shape": np.zeros(good.shape + (2,), dtype=dt), "list": good.tolist(),
               "readonly": good}[out_kind]
        if out_kind == "readonly":
            out.setflags(write=False)
    if divergent and RANK == LAST:
        if divergent == "step":
            step = 9
        elif divergent == "name":
            name = "nope"
        else:
            verify = not verify if isinstance(verify, bool) else True
    what = f"read({name!r}, {step!r}, out=<{out_kind}>, verify={verify!r}, method={method!r}, divergent={divergent})"
    kind, got = judge(world, what, lambda: g.read(name, step, out, method=method, verify=verify), bool(divergent))
    if kind == "ok":
        key = (gname, name, int(step))
        piece = g.piece(name)
        problem = ""
        if key not in world.expected:
            problem = f"read of a step never written by the fuzzer worked: {key}"
        else:
            want = world.expected[key][np.ix_(*piece.indices)]
            if not np.array_equal(got[piece.interior], want):
                problem = f"read {key} returned other values than were written"
        agreed(problem, what)


def do_make_group(world: World, data: Any) -> None:
    bad = corrupt(data, "name", "datasets", "dtype", "shape", "order", "level", "view", "attributes", valid=4)
    pick = lambda arg, good, odd: data.draw(st.sampled_from(odd) if bad == arg else good, arg)  # noqa: E731
    name = pick("name", st.just("new"), ["g3", "", "x/y", 7, "n" * 300])
    datasets = pick("datasets", st.sampled_from([["p"], ("p", "q")]), ["abc", [], ["p", "p"], [1], None, {"p": 1}, [""]])
    dtype = pick("dtype", st.sampled_from(["<f8", "i2", "f8", ">u4"]), [None, "nope", object])
    shape = pick("shape", st.sampled_from([(4, 4), (3,), (2, 3, 2), (0, 2)]),
                 ["44", 4, (-1,), (2**40, 2**40), (4.0,), (np.int64(3), 2), None, [3], (True,)])
    order = pick("order", st.sampled_from(["C", "F"]), ["c", None, 1])
    level = pick("level", st.sampled_from([1, 2, 3]), [0, "3", 3.0, np.int64(2), True])
    view = pick("view", st.sampled_from(["none", "block"]), ["bad-grid", "string", "ghosts"])
    attributes = pick("attributes", st.sampled_from([None, {"k": 1}]), ["x", [1], {}])
    divergent = diverge(data, "shape", "datasets", "level")
    v = {"none": None, "block": sdm.Block(), "bad-grid": sdm.Block(grid=(SIZE + 1,) + (1,) * 5),
         "string": "block", "ghosts": sdm.Block(ghosts=10**6)}[view]
    if divergent and RANK == LAST:
        if divergent == "shape":
            shape = (5, 5)
        elif divergent == "datasets":
            datasets = ["other"]
        else:
            level = 1 if level != 1 else 2
    if name == "new":  # a group name not used yet, so a valid call can work
        name = f"new{CALLS['generated']}"
    what = (f"make_group({name!r}, {datasets!r}, dtype={dtype!r}, shape={shape!r}, order={order!r}, level={level!r}, "
            f"view={view}, attributes={attributes!r}, divergent={divergent})")
    kind, group = judge(world, what, lambda: world.session.make_group(
        name, datasets, dtype=dtype, shape=shape, order=order, level=level, view=v, attributes=attributes), bool(divergent))
    if kind == "ok":
        problem = ""
        if list(group.datasets) != list(datasets):
            problem = f"group datasets {group.datasets} != {datasets}"
        for d in group.datasets:
            rec = group.dataset(d)
            want = (np.dtype(dtype).str, tuple(int(x) for x in ([shape] if np.ndim(shape) == 0 else shape)), order)
            if (rec.dtype, tuple(rec.shape), rec.order) != want:
                problem = f"dataset {d}: stored {(rec.dtype, rec.shape, rec.order)}, asked {want}"
        agreed(problem, what)
        if not problem and group.level in (1, 2, 3):  # a first write and read of the new group round-trips
            d = group.datasets[0]
            rec = group.dataset(d)
            glob = global_array(rec.dtype, tuple(rec.shape), 0, 3)
            judge(world, f"{what}.write", lambda: group.write(d, 0, local_of(group, d, glob, rec.order)))
            _, got = judge(world, f"{what}.read", lambda: group.read(d, 0, verify=True))
            piece = group.piece(d)
            agreed("" if np.array_equal(got[piece.interior], glob[np.ix_(*piece.indices)]) else "read differs", what)


def do_view(world: World, data: Any) -> None:
    gname = data.draw(st.sampled_from(sorted(GROUPS)))
    g = world.groups[gname]
    kind = data.draw(st.sampled_from(["block", "block", "cyclic", "block_cyclic", "subarray", "other"]), "kind")
    ndim = len(world.spec(gname, GROUPS[gname][1][0][0])[1])
    bad = corrupt(data, "grid", "ghosts", "blocks", "datasets", valid=4)
    grid = data.draw(st.sampled_from(["22", (SIZE + 1,), (0,), (2.0,)]) if bad == "grid" else st.sampled_from([None, "default"]), "grid")
    grid = (SIZE,) + (1,) * (ndim - 1) if grid == "default" else grid
    ghosts = data.draw(st.sampled_from([10**6, -1, "1", np.int64(1), True, [(0, 1, 2)]]) if bad == "ghosts"
                       else st.sampled_from([0, 1, [1] * ndim, [(0, 1)] * ndim]), "ghosts")
    blocks = data.draw(st.sampled_from([0, "2", 2.5, [2] * (ndim + 1)]) if bad == "blocks" else st.sampled_from([1, 2, [2] * ndim]), "blocks")
    names = [n for n, *_ in GROUPS[gname][1]]
    datasets = data.draw(st.sampled_from(["a", ["zz"], 5]) if bad == "datasets" else st.sampled_from([None, names[:1]]), "datasets")

    def build() -> Any:
        if kind == "block":
            return sdm.Block(grid=grid, ghosts=ghosts)
        if kind == "cyclic":
            return sdm.Cyclic(grid=grid)
        if kind == "block_cyclic":
            return sdm.BlockCyclic(grid=grid, blocks=blocks)
        if kind == "subarray":  # rows split like Block: tiles exactly
            shp = world.spec(gname, GROUPS[gname][1][0][0])[1]
            n = shp[0]
            lo, hi = n * RANK // SIZE, n * (RANK + 1) // SIZE
            return sdm.Subarray((lo,) + (0,) * (ndim - 1), (hi - lo,) + tuple(shp[1:]), ghosts=ghosts)
        return object()

    what = f"data_view({kind}(grid={grid!r}, ghosts={ghosts!r}, blocks={blocks!r}), datasets={datasets!r}) on {gname}"

    def call() -> None:
        view = build()
        g.data_view(view, datasets)

    judge(world, what, call)
    # writes and reads after this use whatever view is set: they round-trip or are refused


def do_lookup(world: World, data: Any) -> None:
    which = data.draw(st.sampled_from(["group", "steps", "local_shape", "set_attributes", "group_attrs", "find"]), "which")
    arg = data.draw(st.one_of(NAMES, st.sampled_from(["g1", "g2", "g3"])), "arg")
    g = world.groups["g3"]
    if which == "group":
        fn = lambda: world.session.group(arg)  # noqa: E731
    elif which == "steps":
        fn = lambda: g.steps(arg)  # noqa: E731
    elif which == "local_shape":
        fn = lambda: g.local_shape(arg)  # noqa: E731
    elif which == "set_attributes":
        attrs = data.draw(st.sampled_from([{"k": 1}, "x", [("k", 1)], None, {"k": "v", "j": 2.5}]), "attrs")
        fn = lambda: world.session.set_attributes(attrs)  # noqa: E731
    elif which == "group_attrs":
        attrs = data.draw(st.sampled_from([{"k": 1}, "x", None]), "attrs")
        ds = data.draw(st.sampled_from([None, ["a"], "a", ["zz"], 3]), "ds")
        fn = lambda: g.set_attributes(attrs, datasets=ds)  # noqa: E731
    else:
        kwargs = data.draw(st.sampled_from([{}, {"run": 10**30}, {"run": "1"}, {"run": np.int64(1)}, {"since": "yesterday"},
                                            {"until": datetime(2000, 1, 1)}, {"attributes": "x"}, {"application": 5},
                                            {"application": "fuzz"}, {"run": -1}]), "kwargs")
        fn = lambda: world.session.find(**kwargs)  # noqa: E731
    judge(world, f"{which}({arg!r})", fn)


def do_open(world: World, data: Any) -> None:
    base = {"mode": "r", "run": world.session.run_id, "catalog": world.url, "root": str(world.root)}
    key = data.draw(st.sampled_from(["mode", "run", "catalog", "root", "hints", "planner_hints", "method", "sync",
                                     "verify", "checksum", "attributes", "problem_size", "comm"]), "key")
    value = data.draw(st.sampled_from({
        "mode": ["r", "a", "x", 1, None, "R"],
        "run": [world.session.run_id, np.int64(world.session.run_id), 10**30, 0, "1", 1.0, True, 99999],
        "catalog": [world.url, 5, "not a url", "mysql://x/y"],
        "root": [str(world.root), 5, "", "a\0b"],
        "hints": [{}, {"cb_nodes": 2}, {"cb_nodes": "2"}, "abc", {1: "x"}, {"sdm_sync": "x"}, {"sdm_buffer_size": "lots"},
                  {"romio_ds_read": "maybe"}, {"cb_buffer_size": "4m"}],
        "planner_hints": [{}, {"methods": "magic"}, {"methods": 5}, {"frequency": "nan"}, {"trials": "2"}, [1], {"mostly": "read"}],
        "method": ["auto", "posix", "fastest", 5, None],
        "sync": [True, None, 1, "no"],
        "verify": [False, True, None, "yes"],
        "checksum": [None, True, 0],
        "attributes": [None, {}, "x"],
        "problem_size": [None, [4, 4], {"a": object()}, float("nan")],
        "comm": [None, "world", 5],
    }[key]), "value")
    divergent = SIZE > 1 and key in ("hints", "method", "verify") and data.draw(st.booleans(), "div")
    if divergent and RANK == LAST:
        value = {"hints": {"sdm_sync": "sometimes"}, "method": "fastest", "verify": "maybe"}[key]
    kwargs = {**base, key: value}
    if key == "comm":
        kwargs["comm"] = COMM if value == "world" else value
    mode = kwargs.pop("mode")
    what = f"sdm.open('fuzz', {mode!r}, {key}={value!r}, divergent={divergent})"
    kind, session = judge(world, what, lambda: sdm.open("fuzz", mode, **kwargs), divergent)
    if kind == "ok":
        try:
            agreed("" if session.run_id == world.session.run_id else f"opened run {session.run_id}", what)
        finally:
            session.close()


def do_import(world: World, data: Any) -> None:
    bad = corrupt(data, "dtype", "shape", "count", "offset", "source", valid=4)
    pick = lambda arg, good, odd: data.draw(st.sampled_from(odd) if bad == arg else good, arg)  # noqa: E731
    dtype = pick("dtype", st.sampled_from([">f8", "<f8"]), ["nope", object, None, "V0"])
    form = data.draw(st.sampled_from(["count", "shape", "both"]), "form")
    shape = pick("shape", st.sampled_from([(8, 5), (4, 2, 5), (20,)]) if form != "count" else st.none(),
                 ["85", (-8, 5), (2**62, 2**62), (41,), (8.0, 5)])
    count = pick("count", st.just(int(np.prod(shape)) if shape is not None and form == "both" else
                                  (None if form == "shape" else data.draw(st.sampled_from([40, 20, 1]), "n"))),
                 [None, 41, "40", -1, 10**30])
    offset = pick("offset", st.sampled_from([0, 8, np.int64(16)]), [-8, 1.5, 10**30, None])
    source = pick("source", st.just("raw"), ["missing", 5, "dir"])
    src = {"raw": world.raw, "missing": world.root / "missing.bin", "dir": world.root, 5: 5}[source]
    what = f"import_array(dtype={dtype!r}, shape={shape!r}, count={count!r}, offset={offset!r}, source={source})"
    kind, got = judge(world, what, lambda: world.session.import_array("x", src, dtype=dtype, shape=shape, count=count,
                                                                    offset=offset))
    if kind == "ok":
        raw = np.fromfile(world.raw, dtype=np.dtype(dtype))
        start = int(offset) // 8
        n = count if shape is None else int(np.prod(shape))
        glob = raw[start:start + n].reshape(shape if shape is not None else (count,))
        want = np.array_split(glob, SIZE)[RANK]
        agreed("" if np.array_equal(got, want) else "imported values differ from the file", what)


CALLERS = [do_write] * 5 + [do_read] * 4 + [do_write_step] * 2 + [do_make_group] * 2 + [do_view] * 2 + \
    [do_lookup] * 2 + [do_open, do_import]


@FUZZ
@given(data=st.data())
def test_fuzz_public_api(world, data):
    """Random calls of the collective API: each works exactly or fails cleanly everywhere."""
    caller = data.draw(st.sampled_from(CALLERS), "call")
    caller(world, data)


def test_fuzz_views_of_another_kind_on_one_rank(world):
    """A Block view on rank 0 and a Cyclic view elsewhere must be refused on every rank."""
    if SIZE == 1:
        pytest.skip("needs two ranks to disagree")
    g = world.groups["g3"]
    view = sdm.Block() if RANK == 0 else sdm.Cyclic()
    kind, _ = judge(world, "data_view(Block on rank 0, Cyclic elsewhere)", lambda: g.data_view(view, ["b"]), True)
    assert kind == "err"
