"""The MPI job of test_rebuild.py: ``write ROOT URL`` makes two runs, ``read ROOT URL`` checks them (and their infos).

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
    if MPI.COMM_WORLD.rank == 0:
        print("RUNS", *ids)


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
    if MPI.COMM_WORLD.rank == 0:
        print("READ OK", count, "INFOS OK", ninfos)


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](sys.argv[2], sys.argv[3])
