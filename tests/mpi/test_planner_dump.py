"""``auto`` settles within the first dump, and later runs on the target start with what it learned."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import sdm
from mpi4py import MPI
from sdm.planner.learned import RECHECK
from sdm.planner.model import DEFAULTS, CostModel

from _reference import cyclic_indices, global_array, local_from_global

SHAPE = (8, 6)
K = 10  # datasets of one shape in a dump: three contenders, one warm-up and one timed turn each, then the winner
TRIED = ["posix", "list", "datatype"] * 2
HINTS = {"methods": "posix,list,datatype", "trials": 3}


def _tied_calibration(url: str, root: Path, size: int) -> None:
    """Every constant 0: posix, list and datatype are predicted alike (a tie only measuring breaks)."""
    cat = sdm.Catalog(url)
    cat.save_calibration(str(root), size, CostModel({k: 0.0 for k in DEFAULTS}, nprocs=size, calibrated=True).to_json())
    cat.close()


def _dump(s: sdm.Session, step: int, seed: int) -> list[np.ndarray]:
    """Write K datasets of SHAPE in one dump (cyclic pieces); returns the global arrays."""
    rank, size = s.comm.Get_rank(), s.comm.Get_size()
    grid = tuple(MPI.Compute_dims(size, [0, 0]))
    g = s.group("g") if "g" in s.groups else s.make_group(
        "g", [f"v{k}" for k in range(K)], dtype="f8", shape=SHAPE, view=sdm.Cyclic(),
        level=2)  # a file per dataset: at level 3 these small datasets would be written in one combined call
    arrays = [global_array(SHAPE, "f8", "C", seed=seed + k) for k in range(K)]
    g.write_step(step, {f"v{k}": local_from_global(a, cyclic_indices(SHAPE, grid, rank))[0]
                        for k, a in enumerate(arrays)})
    return arrays


def _rows(url: str, run_id: int) -> dict[tuple[int, int], object]:
    """The catalog's write rows of *run_id* by (step, dataset number)."""
    cat = sdm.Catalog(url)
    try:
        return {(w.step, int(d[1:])): w for _, d, w in cat.writes(run_id)}
    finally:
        cat.close()


def _check_bytes(root: Path, rows: dict, expected: dict[int, list[np.ndarray]]) -> None:
    for (step, k), w in rows.items():  # every dataset's bytes, whichever method wrote them
        got = np.memmap(root / w.path, dtype="f8", mode="r", offset=w.offset, shape=SHAPE)
        np.testing.assert_array_equal(got, expected[step][k])


def test_the_first_dump_tries_each_contender_then_writes_the_rest_with_the_winner(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url, root = f"sqlite:///{mpi_tmp}/cat.db", Path(mpi_tmp).resolve()
    if rank == 0:
        _tied_calibration(url, root, size)
    comm.Barrier()
    with sdm.open("dump", root=root, catalog=url, planner_hints=HINTS) as s:
        written = {0: _dump(s, 0, 0), 1: _dump(s, 1, 100)}
        settled = [d for d in s.planner._decided.values()]
        assert len(settled) == 1 and " measured fastest of a tie (" in settled[0].reason
        everyone = comm.allgather((settled[0].method.name, settled[0].reason))
        assert all(e == everyone[0] for e in everyone)  # every rank ended the trial alike
        learned = dict(s.planner.measured)
        run_id = s.run_id
    winner = settled[0].method.name
    assert len(learned) == 1 and next(iter(learned.values())).method == winner
    if rank == 0:
        rows = _rows(url, run_id)
        first = [rows[(0, k)] for k in range(K)]
        assert [w.method for w in first[:6]] == TRIED
        for k, w in enumerate(first[:6]):
            assert w.reason.startswith(f"auto (trial, access {k + 1} of 6): trying {w.method} of posix, list, datatype")
        # the rest of the first dump and all of the second: the winner, with the planner's reason
        assert [(w.method, w.reason) for w in first[6:]] == [(winner, settled[0].reason)] * (K - 6)
        assert {(rows[(1, k)].method, rows[(1, k)].reason) for k in range(K)} == {(winner, settled[0].reason)}
        _check_bytes(root, rows, written)


def test_a_later_run_on_the_target_starts_with_the_learned_method(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url, root = f"sqlite:///{mpi_tmp}/cat.db", Path(mpi_tmp).resolve()
    if rank == 0:
        _tied_calibration(url, root, size)
    comm.Barrier()
    with sdm.open("dump", root=root, catalog=url, planner_hints=HINTS) as s:
        _dump(s, 0, 0)
        (winner,) = {d.method.name for d in s.planner._decided.values()}
        first_run = s.run_id
    with sdm.open("dump", root=root, catalog=url, planner_hints=HINTS) as s:
        written = {0: _dump(s, 0, 7)}
        second_run = s.run_id
        assert s.planner.measured == {}  # nothing measured again
    if rank == 0:
        rows = _rows(url, second_run)
        reason = (f"auto: {winner} learned on this target by the trial of run {first_run} (")
        assert {w.method for w in rows.values()} == {winner}
        assert all(w.reason.startswith(reason) and w.reason.endswith(f"measured again from run {first_run + RECHECK}")
                   for w in rows.values())
        _check_bytes(root, rows, written)
    # other hints: another pattern name, so the run measures it
    with sdm.open("dump", root=root, catalog=url, planner_hints={**HINTS, "methods": "posix,list"}) as s:
        _dump(s, 0, 9)
        third_run = s.run_id
        assert len(s.planner.measured) == 1
    if rank == 0:
        rows = _rows(url, third_run)
        assert [rows[(0, k)].method for k in range(4)] == ["posix", "list"] * 2  # a trial again
