"""The planner under MPI: a calibration measured collectively, auto decisions in the catalog."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import sdm
from sdm.planner import Planner
from sdm.bench.calibrate import QUICK_RUNS, calibrate
from sdm.planner.model import CONSTANTS, DEFAULTS, CostModel

from _reference import cyclic_indices, global_array, local_from_global


def test_quick_calibration_is_the_same_on_every_rank(comm, mpi_tmp):
    model, samples, direct = calibrate(comm, mpi_tmp, quick=True, repeats=1)
    assert model.calibrated and model.nprocs == comm.Get_size()
    assert all(math.isfinite(v) and v >= 0 for v in model.constants.values())
    assert set(CONSTANTS) <= set(model.constants)
    assert {"open", "fsync", "fsync_byte", "commit", "lookup", "checksum_byte", "copy"} <= set(direct)
    # constants measured directly are kept as measured, not refitted
    for name in ("open", "commit", "copy"):
        assert model.constants[name] == direct[name] > 0
    assert len(samples) == 2 * len(QUICK_RUNS)  # every run written and read
    everyone = comm.allgather(sorted(model.constants.items()))
    assert all(e == everyone[0] for e in everyone)
    assert not any(p.name.startswith(".sdm-") for p in Path(mpi_tmp).iterdir())  # scratch files removed


def test_auto_decisions_use_the_stored_calibration_and_are_recorded(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/cat.db"
    root = Path(mpi_tmp).resolve()
    # make independent calls nearly free: auto must then prefer posix or list for a cyclic write
    cheap = {**DEFAULTS, "call": 1e-12, "base": 1e-12, "list": 1e-12, "page": 0.0, "byte_w": 0.0, "byte_r": 0.0}
    if rank == 0:
        cat = sdm.Catalog(url)
        cat.save_calibration(str(root), size, CostModel(cheap, nprocs=size, calibrated=True).to_json())
        cat.close()
    comm.Barrier()
    shape = (6, 4, 3)
    grid = tuple(__import__("mpi4py").MPI.Compute_dims(size, [0, 0, 0]))
    G = global_array(shape, "f8", "C", seed=2)
    with sdm.open("plan", root=root, catalog=url, planner_hints={"trials": 0}) as s:  # the model's choice
        assert s.planner.model.calibrated
        g = s.make_group("g", ["a"], dtype="f8", shape=shape, view=sdm.Cyclic())
        local, _ = local_from_global(G, cyclic_indices(shape, grid, rank))
        g.write("a", 0, local)
        names = comm.allgather(s.planner.choose("auto", _access_like(s, g, local)).method.name)
        assert len(set(names)) == 1
        run_id = s.run_id
    comm.Barrier()
    if rank == 0:
        cat = sdm.Catalog(url)
        (_, _, w), = cat.writes(run_id)
        cat.close()
        assert w.reason.startswith(f"auto: {w.method} predicted") and "calibration" in w.reason
        got = np.memmap(root / w.path, dtype="f8", mode="r", offset=w.offset, shape=shape)
        np.testing.assert_array_equal(got, G)


def test_a_tie_is_measured_on_the_first_writes_and_the_same_method_kept_on_every_rank(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/cat.db"
    root = Path(mpi_tmp).resolve()
    # posix and list writes predicted 100 and 105 us (a tie the model cannot break); reads not tied
    consts = {**{k: 0.0 for k in DEFAULTS}, "base_posix_w": 1e-4, "base_list_w": 1.05e-4, "base_posix_r": 1e-4,
              "base_list_r": 1e-3}
    if rank == 0:
        cat = sdm.Catalog(url)
        cat.save_calibration(str(root), size, CostModel(consts, nprocs=size, calibrated=True).to_json())
        cat.close()
    comm.Barrier()
    shape = (8, 6)
    grid = tuple(__import__("mpi4py").MPI.Compute_dims(size, [0, 0]))
    steps = 10
    arrays = [global_array(shape, "f8", "C", seed=k) for k in range(steps)]
    with sdm.open("tie", root=root, catalog=url, planner_hints={"methods": "posix,list", "trials": 2}) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=shape, view=sdm.Cyclic())
        for k in range(steps):
            g.write("a", k, local_from_global(arrays[k], cyclic_indices(shape, grid, rank))[0])
        settled = [d.reason for d in s.planner._decided.values()]
        assert len(settled) == 1 and " measured fastest of a tie (" in settled[0]
        assert all(other == settled for other in comm.allgather(settled))  # every rank ended the trial alike
        run_id = s.run_id
    comm.Barrier()
    if rank == 0:
        cat = sdm.Catalog(url)
        writes = sorted((w.step, w) for _, _, w in cat.writes(run_id))
        cat.close()
        methods = [w.method for _, w in writes]
        assert methods[:6] == ["posix", "list"] * 3  # one warm-up and two timed writes each, in turns
        assert all(w.reason.startswith(f"auto (trial, access {k + 1} of 6): trying {w.method} of posix, list")
                   for k, (_, w) in enumerate(writes[:6]))
        assert all(w.reason == settled[0] and w.reason.startswith(f"auto: {w.method} measured")
                   for _, w in writes[6:])
        for (step, w), expected in zip(writes, arrays):  # every step's bytes, whichever method wrote them
            got = np.memmap(root / w.path, dtype="f8", mode="r", offset=w.offset, shape=shape)
            np.testing.assert_array_equal(got, expected)


def _access_like(session, group, local):
    """The access every rank describes for its write (what the planner decides on)."""
    from sdm.planner import Access, rank_stats_tuple

    piece = group.piece("a")
    stats = session.comm.allgather(rank_stats_tuple(piece, "C", local))
    return Access.from_stats(stats, writing=True, level=3, itemsize=8, total_bytes=8 * int(np.prod(piece.shape)))


def test_the_planner_is_a_pure_function_of_its_inputs(comm):
    model = CostModel(nprocs=comm.Get_size(), calibrated=True)
    a = dict(writing=True, level=3, itemsize=8, total_bytes=4096, rank_bytes=(1024,) * 4, rank_regions=(128,) * 4)
    from sdm.planner import Access

    decisions = comm.allgather(Planner(model=model).choose("auto", Access(**a)).reason)
    assert len(set(decisions)) == 1


@pytest.mark.parametrize("writing,settle", [(True, 1), (False, 1), (True, 2), (False, 3)])
def test_settled_samples_time_inner_calls_after_untimed_calls(comm, mpi_tmp, monkeypatch, writing, settle):
    from sdm.bench import measure
    from sdm.bench.patterns import Pattern

    pattern = Pattern(64, 32)
    calls, checked = [], []
    real_timed, real_check = measure.timed, measure.check_file
    monkeypatch.setattr(measure, "timed", lambda c, fn: (calls.append(1), real_timed(c, fn))[1])
    monkeypatch.setattr(measure, "check_file", lambda *a: (checked.append(1), real_check(*a))[1])
    with measure.data_file(comm, mpi_tmp, pattern) as (data, _):
        times, chosen, ok = measure.run_method(comm, mpi_tmp, pattern, "list", writing, 3, data=data, inner=2,
                                               settle=settle, check=True)
    assert chosen == "list" and ok
    assert len(times) == 3 and all(t > 0 for t in times)
    assert len(calls) == 3 * (2 + settle)  # each sample: the untimed calls, then two timed ones
    assert len(checked) == (3 * 2 if writing else 0)  # every timed write's file is checked, not the settling ones


def test_steady_memory_is_collective_and_installs_nothing(comm):
    import signal

    from sdm.bench import measure

    before = signal.getsignal(signal.SIGTERM)
    with measure.steady_memory(comm, 4 << 20) as memory:
        assert signal.getsignal(signal.SIGTERM) is before
        comm.Barrier()
    assert memory == {"touch_rate": memory["touch_rate"]} and memory["touch_rate"] > 0
    assert len(set(comm.allgather(memory["touch_rate"]))) == 1  # the same rate on every rank
    assert signal.getsignal(signal.SIGTERM) is before
