"""The MPI job of test_references.py: ``write ROOT URL`` writes one run on every rank and prints ``RUN <id>``.

Every group exercises one way SDM stores a step, the values from :func:`reference` (numpy
formulas the test uses as well):

* ``fields`` (level 3, a new file every 2 steps, sdm.Block): ``T`` big-endian float64,
  ``F`` float32 in Fortran order, ``n`` int32 at the even steps only, ``b`` bool, ``c``
  complex128, ``r`` a structured dtype, ``s`` byte strings;
  steps 0-3;
* ``cyclic`` (level 1, sdm.BlockCyclic): ``q`` float64 with dimension names and an ``x`` coordinate;
* ``mesh`` (level 2, sdm.MapArray, each rank's rows reversed): ``x`` float32;
* ``comp`` (compressed, one chunk per writer's box): ``z`` zstd + shuffle, ``l`` lz4 big-endian
  int64, ``zf`` zfp tolerance in Fortran order, ``zr`` zfp rate on float32;
* ``sub`` (3 subfiles, level 2): ``a`` float64 and ``sf`` float64 in Fortran order;
* ``parts`` (sdm.Ranked): ``p`` int64 rows of 2, rank r giving r + 1 rows;

groups other than ``fields`` at steps 0 and 1. Shapes split evenly over 1 to 4 ranks.
"""

from __future__ import annotations

import sys

import numpy as np

ATTRIBUTES = {"case": "refs", "nx": 12, "dt": 0.25}
STRUCT = np.dtype([("a", "<f8"), ("b", "<i2")])
#: group -> (dataset -> (shape, dtype, order)), with the steps written
DATASETS = {
    "fields": {"T": ((12, 5), ">f8", "C"), "F": ((4, 6), "<f4", "F"), "n": ((12,), "<i4", "C"),
               "b": ((12,), "|b1", "C"), "c": ((12, 2), "<c16", "C"), "r": ((12,), STRUCT, "C"),
               "s": ((12,), "|S4", "C")},
    "cyclic": {"q": ((12, 4), "<f8", "C")},
    "mesh": {"x": ((12, 2), "<f4", "C")},
    "comp": {"z": ((12, 4), "<f8", "C"), "l": ((12, 4), ">i8", "C"), "zf": ((12, 4), "<f8", "F"),
             "zr": ((12, 4), "<f4", "C")},
    "sub": {"a": ((12, 4), "<f8", "C"), "sf": ((4, 12), "<f8", "F")},
}
CODECS = {"z": "zstd:3:shuffle", "l": "lz4", "zf": "zfp:tolerance=0.001", "zr": "zfp:rate=16"}
STEPS = {"fields": [0, 1, 2, 3], "cyclic": [0, 1], "mesh": [0, 1], "comp": [0, 1], "sub": [0, 1], "parts": [0, 1]}
OWN_STEPS = {"n": [0, 2]}  # a dataset written at fewer steps than its group
X = np.linspace(0.0, 1.0, 12)


def steps_of(group: str, name: str) -> list[int]:
    """The steps *name* of *group* was written at."""
    return OWN_STEPS.get(name, STEPS[group])


def reference(group: str, name: str, step: int, ranks: int = 1) -> np.ndarray:
    """The global array of a dataset at *step* (for ``p``: all rows of *ranks* writers, in rank order)."""
    if name == "p":
        rows = sum(r + 1 for r in range(ranks))
        return np.arange(rows * 2, dtype="<i8").reshape(rows, 2) + 100 * step
    shape, dtype, order = DATASETS[group][name]
    n = int(np.prod(shape))
    base = np.arange(n, dtype=np.float64).reshape(shape)
    if name == "b":
        return ((np.arange(n) + step) % 3 == 0).reshape(shape)
    if name == "c":
        return (base * (1 + 1j) + step).astype(dtype)
    if name == "r":
        out = np.zeros(shape, STRUCT)
        out["a"], out["b"] = base * 0.5 + step, (np.arange(n) - 5 * step).astype("<i2")
        return out
    if name == "s":
        return np.array([f"s{k + step}".encode() for k in range(n)], dtype="|S4").reshape(shape)
    if name in ("zf", "zr"):
        return (np.sin(base / 3.0) * 10 + step).astype(dtype)
    return (base * 1.5 - 3 * step + (7 if name == "n" else 0)).astype(dtype)


def write(root: str, url: str, skip: tuple[str, ...] = ()) -> None:
    """Write the run on every rank of MPI.COMM_WORLD (without the datasets named in *skip*)."""
    from mpi4py import MPI

    import sdm

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    def boxed(g: "sdm.Group", group: str, name: str, step: int) -> np.ndarray:
        return reference(group, name, step)[np.ix_(*g.piece(name).indices)]

    with sdm.open("references", root=root, catalog=url, attributes=ATTRIBUTES) as s:
        specs = {grp: [sdm.Dataset(n, shape=sh, dtype=dt, order=o, compression=CODECS.get(n))
                       for n, (sh, dt, o) in names.items() if n not in skip] for grp, names in DATASETS.items()}
        made = {
            "fields": s.make_group("fields", specs["fields"], level=3, steps_per_file=2, attributes={"units": "K"}),
            "cyclic": s.make_group("cyclic", specs["cyclic"], level=1, view=sdm.BlockCyclic(blocks=2), dims=("x", "y"),
                                   coords={"x": X}),
            "comp": s.make_group("comp", specs["comp"], level=3),
            "sub": s.make_group("sub", specs["sub"], level=2, subfiles=3),
        }
        rows = np.arange(rank, 12, size)[::-1]
        mesh = s.make_group("mesh", specs["mesh"], level=2, view=sdm.MapArray(rows))
        for group, g in made.items():
            for step in STEPS[group]:
                for name in DATASETS[group]:
                    if step in steps_of(group, name) and name not in skip:
                        g.write(name, step, boxed(g, group, name, step))
        for step in STEPS["mesh"]:
            mesh.write("x", step, reference("mesh", "x", step)[rows])
        parts = s.make_group("parts", ["p"], dtype="<i8", shape=(2,), view=sdm.Ranked())
        start = sum(r + 1 for r in range(rank))
        for step in STEPS["parts"]:
            parts.write("p", step, reference("parts", "p", step, size)[start:start + rank + 1])
        if rank == 0:
            print(f"RUN {s.run_id}", flush=True)


if __name__ == "__main__":
    write(sys.argv[2], sys.argv[3])
