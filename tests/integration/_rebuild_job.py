"""The MPI job of test_rebuild.py: ``write ROOT URL`` makes three runs, ``read ROOT URL`` checks them (and infos).

Every value comes from :func:`reference`, a numpy formula of (run, dataset, step, global
index) that the test and this job compute independently of SDM.  ``write`` prints the
run ids (rank 0); ``read`` reads every step of every dataset of both runs with
``verify=True`` on this job's ranks and compares it with the reference, printing
``READ OK n`` (n arrays compared).
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import sdm

#: (group, level, dataset, dtype, shape, steps) of each run; step 10 of the first dataset of each group is overwritten.
GROUPS = [
    ("fields", 3, ["T", "q"], "<f8", (12, 10), [0, 10, 20]),
    ("one", 1, ["a"], "<i4", (30,), [0, 10]),
    ("two", 2, ["b"], "<f4", (6, 4, 3), [5, 10, 15]),
]
OVERWRITTEN = 10


def infos(run: int) -> dict[tuple[str | None, str | None, int | None, str], np.ndarray]:
    """The infos of the *run*-th run: ``(group, dataset, step, name) -> array`` (set after a first value each)."""
    return {
        (None, None, None, "units"): np.array(["K", "m/s"], dtype="U3"),
        ("fields", None, None, "material"): np.arange(6, dtype=">f8").reshape(2, 3) + run,
        ("fields", "T", None, "scale"): np.float32(run / 4),
        ("fields", "q", 10, "dt"): np.array([b"ten", b"%d" % run]),
    }


def set_infos(s: sdm.Session, run: int) -> None:
    """Set every info of the run twice (a first value, then the reference: setting again replaces)."""
    for (gname, dname, step, name), arr in infos(run).items():
        for value in (np.arange(3), arr):
            if gname is None:
                s.set_info(name, value)
            else:
                s.group(gname).set_info(name, value, dataset=dname, step=step)


def check_infos(s: sdm.Session, run: int) -> int:
    """Compare every info of the run with its reference (values, dtype, shape); how many."""
    for (gname, dname, step, name), want in infos(run).items():
        got = s.info(name) if gname is None else s.group(gname).info(name, dname, step)
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
        np.testing.assert_array_equal(got, want)
    return len(infos(run))


def reference(run: int, dataset: str, step: int, dtype: str, shape: tuple[int, ...], version: int = 1) -> np.ndarray:
    """The global array of *dataset* at *step* in the *run*-th run of the job (its *version*)."""
    salt = sum(map(ord, dataset))
    n = int(np.prod(shape))
    return (np.arange(n) % 97 + 1000 * step + 100 * salt + 7 * run + 50000 * (version - 1)).astype(dtype).reshape(shape)


def _local(g: sdm.Group, name: str, glob: np.ndarray) -> np.ndarray:
    p = g.piece(name)
    return np.ascontiguousarray(glob[np.ix_(*p.indices)])


def write(root: str, url: str) -> None:
    ids = []
    for run in (1, 2):
        with sdm.open("rebuilt", root=root, catalog=url, attributes={"case": f"c{run}", "nx": 12, "dt": 0.5,
                                                                       "ok": run == 1},
                      problem_size=[12, 10], async_commit=(run == 2)) as s:
            if run == 2:
                src = f"{root}/input.bin"
                if s.rank == 0:
                    np.arange(40, dtype="<f8").tofile(src)
                s.comm.Barrier()
                s.import_array("x", src, dtype="<f8", count=40)
            for gname, level, names, dtype, shape, steps in GROUPS:
                g = s.make_group(gname, names, dtype=dtype, shape=shape, level=level,
                                 attributes={"kind": gname, "level": level})
                if gname == "fields":
                    g.data_view(sdm.Block())  # recorded as the datasets' distribution
                g.set_attributes({"units": "m/s"}, datasets=[names[0]])
                for step in steps:
                    g.write_step(step, {n: _local(g, n, reference(run, n, step, dtype, shape)) for n in names})
                g.write(names[0], OVERWRITTEN, _local(g, names[0], reference(run, names[0], OVERWRITTEN, dtype, shape, 2)),
                        overwrite=True)
            set_infos(s, run)
            s.set_attributes(done=True)
            ids.append(s.run_id)
    ids.append(write_features(root, url))
    if MPI.COMM_WORLD.rank == 0:
        print("RUNS", *ids)


# ------------------------------------------------------------------ run 3: the other features
MESH_ROWS = 20
STATE_STEPS = [0, 1, 2, 3, 4]
TRUNCATED_AFTER = 2
RANKED_STEPS = [0, 1, 2]


def mesh_rows(rank: int, size: int) -> np.ndarray:
    """A map-array view: rank r owns rows r, r + size, ... in reverse order in memory."""
    return np.arange(rank, MESH_ROWS, size)[::-1].copy()


def mesh_reference() -> np.ndarray:
    return (np.arange(MESH_ROWS * 3, dtype="<f8").reshape(MESH_ROWS, 3) * 0.25 + 3.0)


def state_reference(step: int, restarted: bool) -> np.ndarray:
    """Stored as float32, written from float64; steps after the truncation written again after a restart."""
    return np.linspace(0.0, 1.0, 24).reshape(4, 6) + step + (100.0 if restarted else 0.0)


def ranked_rows(writer: int, step: int) -> np.ndarray:
    """The rows writer rank *writer* gives at *step* (none at all for some)."""
    n = (writer + step) % 3
    return (np.arange(n * 2, dtype="<i8").reshape(n, 2) + 1000 * writer + 10 * step)


def ranked_reference(step: int, writers: int) -> np.ndarray:
    return np.concatenate([ranked_rows(r, step) for r in range(writers)]).reshape(-1, 2)


def _mesh_edges() -> tuple[np.ndarray, int]:
    ids = np.arange(6 * 5).reshape(5, 6)
    edges = np.concatenate([np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()]),
                            np.stack([ids[:-1].ravel(), ids[1:].ravel()])], axis=1).T
    return edges, ids.size


def write_features(root: str, url: str) -> int:
    """Run 3: a map-array view, a topology group, files per steps, a ranked section, a type conversion,
    a truncation with new steps after it, and an index history."""
    from sdm import irregular

    with sdm.open("rebuilt", root=root, catalog=url, attributes={"case": "c3"}) as s:
        rank, size = s.rank, s.size
        mesh = s.make_group("mesh", ["xyz"], dtype="<f8", shape=(MESH_ROWS, 3), level=2, kind="topology",
                            view=sdm.MapArray(mesh_rows(rank, size)))
        mesh.write("xyz", 0, mesh_reference()[mesh_rows(rank, size)])
        parts = s.make_group("parts", ["p"], dtype="<i8", shape=(2,), level=3, steps_per_file=2, view=sdm.Ranked())
        for step in RANKED_STEPS:
            parts.write("p", step, ranked_rows(rank, step))
        state = s.make_group("state", ["u"], dtype="<f4", shape=(4, 6), level=3)
        for step in STATE_STEPS:
            state.write("u", step, _local(state, "u", state_reference(step, False)))
        s.truncate(after_step=TRUNCATED_AFTER, groups=["state"])
        for step in STATE_STEPS[TRUNCATED_AFTER + 1:]:
            state.write("u", step, _local(state, "u", state_reference(step, True)))
        edges, n = _mesh_edges()
        mine = np.array_split(np.arange(len(edges)), size)[rank]
        partvec = np.arange(n) % size
        irregular.partition(s, "grid", partvec, irregular.EdgeBlocks(edges[mine, 0], edges[mine, 1], n, len(edges),
                                                                      s.comm))
        return s.run_id


def read_features(root: str, url: str) -> int:
    """Read run 3 back, every step verified; returns the number of arrays compared."""
    count = 0
    with sdm.open("rebuilt", "r", root=root, catalog=url, attributes={"case": "c3"}) as s:
        rank, size = s.rank, s.size
        mesh = s.group("mesh")
        assert mesh.kind == "topology"
        mesh.data_view(sdm.MapArray(mesh_rows(rank, size)))
        np.testing.assert_array_equal(mesh.read("xyz", 0, verify=True), mesh_reference()[mesh_rows(rank, size)])
        count += 1
        parts = s.group("parts")
        for step in RANKED_STEPS:
            writers = parts.ranked_counts("p", step).nranks
            got = parts.read("p", step, verify=True, ranks=(0, writers))
            np.testing.assert_array_equal(got, ranked_reference(step, writers))
            count += 1
        state = s.group("state")
        assert state.steps("u") == STATE_STEPS
        for step in STATE_STEPS:
            want = state_reference(step, step > TRUNCATED_AFTER).astype("<f4")
            np.testing.assert_array_equal(state.read("u", step, verify=True), _local(state, "u", want))
            count += 1
    return count


def read(root: str, url: str) -> None:
    count = ninfos = 0
    for run in (1, 2):
        with sdm.open("rebuilt", "r", root=root, catalog=url, attributes={"case": f"c{run}"}) as s:
            ninfos += check_infos(s, run)
            for gname, _, names, dtype, shape, steps in GROUPS:
                g = s.group(gname)
                for n in names:
                    assert g.steps(n) == sorted(set(steps + [OVERWRITTEN])), (gname, n, g.steps(n))
                    for step in g.steps(n):
                        version = 2 if (n == names[0] and step == OVERWRITTEN) else 1
                        got = g.read(n, step, verify=True)
                        want = _local(g, n, reference(run, n, step, dtype, shape, version))
                        np.testing.assert_array_equal(got, want)
                        count += 1
    count += read_features(root, url)
    if MPI.COMM_WORLD.rank == 0:
        print("READ OK", count, "INFOS OK", ninfos)


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](sys.argv[2], sys.argv[3])
