"""The cost model and the predictor reproduce hand-computed costs for given constants.

Every expected value below is worked out by hand from the model's documented units
(sdm/planner/model.py); the constants are round numbers so the arithmetic can be
checked on paper.  Constants not named are zero.
"""

from __future__ import annotations

import math

import pytest
from sdm.io.servers import chunk_rows
from sdm.planner import Access
from sdm.planner.model import DEFAULTS, CostModel
from sdm.planner.predict import Workload, predict

ZERO = {k: 0.0 for k in DEFAULTS}


def model(nprocs: int = 2, cores: int = 2, **constants: float) -> CostModel:
    return CostModel(constants={**ZERO, **constants}, nprocs=nprocs, cores=cores, calibrated=True)


def access(writing, nbytes, regions, segments, spans, total=1024):
    return Access(writing=writing, level=3, itemsize=8, total_bytes=total, rank_bytes=tuple(nbytes),
                  rank_regions=tuple(regions), rank_segments=tuple(segments), rank_spans=tuple(spans))


INTERLEAVED = dict(nbytes=(64, 128), regions=(8, 4), segments=(8, 16), spans=((0, 1024), (8, 1016)))


def test_posix_write_is_calls_bytes_and_a_share_of_new_pages_of_the_slowest_rank():
    m = model(base=1e-3, call=1e-6, byte_w=1e-9, page=2e-6)
    # both ranks touch the one page of the 1 KiB span: half a new page each; rank 1 is slower (16 calls, 128 B)
    assert m.predict("posix", access(True, **INTERLEAVED)).seconds == pytest.approx(1e-3 + 16e-6 + 128e-9 + 1e-6,
                                                                                    rel=1e-12)


def test_sparse_writes_pay_for_every_new_page():
    m = model(call=1e-6, page=5e-7)
    a = access(True, (1024,), (16,), (16,), ((0, 15 * 65536 + 64),), total=1 << 20)  # 64 KiB apart
    assert m.predict("posix", a).seconds == pytest.approx(16e-6 + 16 * 5e-7, rel=1e-12)
    dense = access(True, (1024,), (16,), (16,), ((0, 1024),), total=1 << 20)  # one page
    assert m.predict("posix", dense).seconds == pytest.approx(16e-6 + 5e-7, rel=1e-12)


def test_list_io_is_one_call_and_a_walk_over_the_segments():
    m = model(call=1e-6, list=1e-7, byte_r=1e-9)
    a = access(False, (64,), (8,), (8,), ((0, 1024),))
    assert m.predict("list", a).seconds == pytest.approx(1e-6 + 8e-7 + 64e-9, rel=1e-12)


def test_collective_without_interleaving_is_independent_io_after_a_gather():
    m = model(sync=1e-3, call=1e-6, base=1e-4)
    a = access(True, (512, 512), (1, 1), (1, 1), ((0, 512), (512, 1024)))
    assert m.predict("collective", a).seconds == pytest.approx(m.predict("datatype", a).seconds + 1e-3, rel=1e-12)
    assert m.predict("datatype", a).seconds == pytest.approx(1e-4 + 1e-6, rel=1e-12)


def test_collective_interleaved_exchanges_every_byte_with_one_aggregator():
    m = model(sync=1e-3, exchange=1e-9, region=1e-7)
    assert m.predict("collective", access(True, **INTERLEAVED)).seconds == pytest.approx(1e-3 + 192e-9 + 12e-7,
                                                                                         rel=1e-12)


def test_servers_rounds_are_the_io_methods_chunks():
    m = model(sync=1e-4)
    a = access(False, (512, 512), (1, 1), (1, 1), ((0, 512), (512, 1024)))
    rows = 1024 // 8  # no row size given: one element per row
    for hints, rounds in (({}, 1), ({"sdm_buffer_size": "256"}, 2)):
        per = chunk_rows(0, rows, 8, int(hints.get("sdm_buffer_size", 16 << 20)), 2)
        assert math.ceil(math.ceil(rows / per) / 2) == rounds
        # in shared memory: two barriers per round
        assert m.predict("servers", a, hints).seconds == pytest.approx(2 * rounds * 1e-4, rel=1e-12)


def test_sieving_writes_with_overlapping_holes_take_turns():
    m = model(sync=1e-4)
    assert m.predict("sieving", access(True, **INTERLEAVED)).seconds == pytest.approx(2e-4, rel=1e-12)
    assert m.predict("sieving", access(False, **INTERLEAVED)).seconds == 0.0  # reads never wait


def test_numpy_copies_pay_per_single_element_or_per_longer_run():
    m = model(elem=1e-9, run=1e-8, copy=1e-10)
    singles = access(False, (64,), (8,), (8,), ((0, 64),))
    assert m.predict("sieving", singles).seconds == pytest.approx(8e-9, rel=1e-12)
    runs = access(False, (64,), (1,), (2,), ((0, 64),))
    assert m.predict("sieving", runs).seconds == pytest.approx(2e-8 + 64e-10, rel=1e-12)


def test_constants_scale_with_cpu_contention_for_other_rank_counts():
    m = model(nprocs=2, cores=2, base=1e-3, call=1e-6, open=5e-4)
    a = access(True, (8,) * 8, (1,) * 8, (1,) * 8, tuple((8 * r, 8 * r + 8) for r in range(8)), total=64)
    # 8 ranks on 2 cores: 4 times the contention of the calibration's 2 ranks
    assert m.predict("posix", a).seconds == pytest.approx(4 * (1e-3 + 1e-6), rel=1e-12)
    assert m.scaled(8)["open"] == 5e-4  # measured directly: not scaled


def test_a_calibration_keeps_known_constants_and_takes_defaults_for_the_rest():
    m = CostModel.from_calibration({"id": 7, "constants": {"nprocs": 3, "cores": 8, "constants": {
        "call": 9e-6, "no_such_constant": 1.0}}})
    assert m.calibrated and m.nprocs == 3 and m.cores == 8 and "calibration 7" in m.label
    assert m.constants == {**DEFAULTS, "call": 9e-6}
    assert CostModel.from_calibration({"constants": m.to_json()}).constants == m.constants
    assert not CostModel.from_calibration(None).calibrated


def test_predictor_totals_per_organization_level():
    m = model(nprocs=1, cores=1, base=1e-4, call=1e-6, byte_w=1e-9, commit=1e-3, fsync=2e-3, fsync_byte=1e-8,
              open=5e-4, checksum_byte=1e-9, page=1e-6)
    w = Workload(shape=(16,), dtype="f8", distribution="block", datasets=2, every=5, iterations=20, ranks=1)
    result = predict(w, m)
    row = next(r for r in result["rows"] if r["method"] == "posix")
    # method: base + one call + 128 bytes + one new page; SDM: commit + checksum and sync of 128 bytes
    per_write = (1e-4 + 1e-6 + 128e-9 + 1e-6) + (1e-3 + 128e-9 + 2e-3 + 128 * 1e-8)
    assert row["per_write"] == pytest.approx(per_write, rel=1e-12)
    assert w.writes == 8
    assert row["total"][1] == pytest.approx(8 * per_write + 8 * 5e-4, rel=1e-12)  # a file per write
    assert row["total"][2] == pytest.approx(8 * per_write + 2 * 5e-4, rel=1e-12)  # a file per dataset
    assert row["total"][3] == pytest.approx(8 * per_write + 1 * 5e-4, rel=1e-12)  # one file
    m2 = model(nprocs=1, cores=1, base=2e-4, call=1e-6, byte_r=5e-10, lookup=1e-3, open=5e-4)
    r = Workload(shape=(16,), dtype="f8", distribution="block", datasets=2, every=5, iterations=20, ranks=1, reads=1)
    row = next(x for x in predict(r, m2)["rows"] if x["method"] == "posix")
    per_read = (2e-4 + 1e-6 + 128 * 5e-10) + 1e-3
    assert row["per_read"] == pytest.approx(per_read, rel=1e-12)
    writes = 8 * (2e-4 + 1e-6)  # the writes: base and one call each
    assert row["total"][3] == pytest.approx(writes + 8 * per_read + 2 * 1 * 5e-4, rel=1e-12)  # opened again to read


def test_a_new_handles_first_collective_write_is_paid_per_file_held_open():
    m = model(nprocs=2, cores=2, page=2e-6, open=1e-3)
    w = Workload(shape=(2048,), dtype="f8", distribution="cyclic", datasets=3, every=1, iterations=4, ranks=2,
                 reads=0, sync=False)
    row = next(r for r in predict(w, m)["rows"] if r["method"] == "collective")
    # 16 KiB interleaved by two ranks: the aggregator's buffer is touched over 4 pages
    assert row["per_held_file"] == pytest.approx(4 * 2e-6, rel=1e-12)
    assert row["total"][2] - row["total"][3] == pytest.approx((3 - 1) * (1e-3 + 4 * 2e-6), rel=1e-9)


def test_servers_parameters_default_to_shared_memory_and_16_mib_buffers():
    from sdm.planner.model import Params

    assert Params.of({}).shm is True and Params.of({}).server_buffer == 16 << 20
    assert Params.of({"sdm_shm": "disable", "sdm_buffer_size": "1m"}) == Params(server_buffer=1 << 20, shm=False)


def test_ncio_orders_are_shuffled_permutations_fixed_by_the_seed():
    from sdm.bench.ncio import _shuffled

    names = ["posix", "list", "datatype", "sieving", "collective", "servers", "auto"]
    orders = [_shuffled(names, seed) for seed in range(20)]
    assert all(sorted(o) == sorted(names) for o in orders)
    assert orders == [_shuffled(names, seed) for seed in range(20)]  # the same on every rank
    assert len({tuple(o) for o in orders}) > 10
    assert {o[o.index("auto") - 1] for o in orders if o[0] != "auto"} != {"servers"}  # auto's predecessor varies


