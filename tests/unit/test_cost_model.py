"""The cost model and the predictor reproduce hand-computed costs for given constants.

Every expected value below is worked out by hand from the model's documented terms
(sdm/planner/model.py); the constants are round numbers so the arithmetic can be
checked on paper.  Constants not named are zero.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from sdm.planner import Access
from sdm.planner.model import CONSTANTS, DEFAULTS, CostModel, size_weights
from sdm.planner.predict import Workload, predict

ZERO = {k: 0.0 for k in (*CONSTANTS, "open", "fsync", "fsync_byte", "commit", "lookup", "first_w", "first_r", "session_r", "pwrite",
                         "checksum_byte")}


def model(nprocs: int = 2, cores: int = 2, **constants: float) -> CostModel:
    named = {k.replace("__", "@"): v for k, v in constants.items()}
    return CostModel(constants={**ZERO, **named}, nprocs=nprocs, cores=cores, calibrated=True)


def access(writing, nbytes, regions, segments, spans, total=1024):
    return Access(writing=writing, level=3, itemsize=8, total_bytes=total, rank_bytes=tuple(nbytes),
                  rank_regions=tuple(regions), rank_segments=tuple(segments), rank_spans=tuple(spans))


def test_size_weights_interpolate_in_log_size():
    assert size_weights(8) == {4096: 1.0}
    assert size_weights(1 << 30) == {16777216: 1.0}
    assert size_weights(65536) == {4096: 0.0, 65536: 1.0}  # exactly on a node
    w = size_weights(16384)  # log2: 12 -> 14 -> 16, so half way
    assert w[4096] == pytest.approx(1 / 2, rel=1e-12) and w[65536] == pytest.approx(1 / 2, rel=1e-12)
    w = size_weights(262144)  # log2: 16 -> 18 -> 19, so 2/3 of the way
    assert w[65536] == pytest.approx(1 / 3, rel=1e-12) and w[524288] == pytest.approx(2 / 3, rel=1e-12)


def test_posix_write_is_calls_seeks_and_bytes_of_the_slowest_rank():
    m = model(base_posix_w=1e-3, call_w=1e-6, seek_w=2e-6, byte_w__4096=1e-9)
    a = access(True, (64, 128), (8, 4), (8, 16), ((0, 1024), (8, 1016)))
    # rank 0: 8 calls, 8 seeks, 64 B = 24.064 us; rank 1: 16 calls, 4 seeks, 128 B = 24.128 us
    assert m.predict("posix", a).seconds == pytest.approx(1e-3 + 24.128e-6, rel=1e-12)


def test_sparse_writes_pay_for_every_new_page():
    m = model(call_w=1e-6, page_w=5e-7)
    # 16 regions of 64 B, 64 KiB apart: each in a page of its own
    a = access(True, (1024,), (16,), (16,), ((0, 15 * 65536 + 64),), total=1 << 20)
    assert m.predict("posix", a).seconds == pytest.approx(16e-6 + 16 * 5e-7, rel=1e-12)
    # the same bytes back to back touch one page
    dense = access(True, (1024,), (16,), (16,), ((0, 1024),), total=1 << 20)
    assert m.predict("posix", dense).seconds == pytest.approx(16e-6 + 1 * 5e-7, rel=1e-12)


def test_pages_a_small_write_creates_alone_cost_more():
    m = model(call_w=1e-6, page_w=5e-7, page_part_w=2e-6)
    # 16 regions of 64 B, 64 KiB apart: 16 new pages, each made by a 64-byte write
    a = access(True, (1024,), (16,), (16,), ((0, 15 * 65536 + 64),), total=1 << 20)
    assert m.predict("posix", a).seconds == pytest.approx(16e-6 + 16 * (5e-7 + 2e-6), rel=1e-12)
    # two 8 KiB regions: whole pages, written in large requests
    big = access(True, (16384,), (2,), (2,), ((0, 65536 + 8192),), total=1 << 20)
    assert m.predict("posix", big).seconds == pytest.approx(2e-6 + 4 * 5e-7, rel=1e-12)


def test_interleaved_ranks_create_each_shared_page_once():
    m = model(call_w=1e-6, page_w=5e-7)
    # two ranks, 8-byte regions alternating over 2 pages: each touches both pages, creates one
    a = access(True, (4096, 4096), (512, 512), (512, 512), ((0, 8184), (8, 8192)), total=8192)
    assert m.predict("posix", a).seconds == pytest.approx(512e-6 + 1 * 5e-7, rel=1e-12)


def test_read_modify_write_over_holes_pays_hole_pages_not_bytes():
    m = model(nprocs=1, cores=1, page_w=1e-6, hole_w=7e-6, buf_r=1e-9, byte_w__4096=2e-9, byte_w__524288=2e-9)
    # one rank, 4 regions of 64 B 64 KiB apart, within one 512 KiB ROMIO window: the window
    # (3 x 65600 + 64 bytes: 49 pages, none written yet) is read and written back whole
    a = access(True, (256,), (4,), (4,), ((0, 3 * 65600 + 64),), total=3 * 65600 + 64)
    assert m.predict("datatype", a).seconds == pytest.approx(49 * 7e-6, rel=1e-12)
    # ROMIO's independent contiguous write creates only the pages of its bytes
    one = access(True, (256,), (1,), (1,), ((0, 256),), total=256)
    assert m.predict("datatype", one).seconds == pytest.approx(1e-6 + 256 * 2e-9, rel=1e-12)


def test_read_modify_write_of_overlapping_windows_creates_each_hole_page_once():
    m = model(nprocs=2, cores=2, hole_w=7e-6, buf_r=1e-9, byte_w__4096=2e-9, byte_w__65536=2e-9,
              byte_w__524288=2e-9)
    # two ranks, 8-byte regions alternating over 32 pages: each rank's 512 KiB ROMIO window
    # covers the whole span; each makes half of its pages (16) from holes, reads the other
    # 16 pages' bytes as data and writes them back
    a = access(True, (65536, 65536), (8192, 8192), (8192, 8192), ((0, 131064), (8, 131072)), total=131072)
    data = 131064 - 16 * 4096
    assert m.predict("datatype", a).seconds == pytest.approx(16 * 7e-6 + data * 1e-9 + data * 2e-9, rel=1e-9)


def test_romio_windows_skip_holes_wider_than_the_buffer():
    m = model(nprocs=1, cores=1, call_w=1e-6, call_r=1e-6, lock=1e-5, hole_w=7e-6)
    # 4 regions of 1 MiB, 4 MiB apart: 512 KiB windows start at each region, 2 per region,
    # 8 in all (8 locks, 8 reads, 8 writes), covering 4 MiB = 1024 pages, not the 13 MiB span
    mib = 1 << 20
    a = access(True, (4 * mib,), (4,), (4,), ((0, 13 * mib),), total=13 * mib)
    assert m.predict("datatype", a).seconds == pytest.approx(8 * (1e-6 + 1e-6 + 1e-5) + 1024 * 7e-6, rel=1e-12)


def test_reads_into_a_method_buffer_cost_buf_r_whatever_their_size():
    m = model(nprocs=1, cores=1, call_r=1e-6, buf_r=1e-10, byte_r__4096=1e-9, byte_r__65536=1e-9,
              byte_r__524288=1e-9, byte_r__16777216=1e-9)
    # 64 regions of 8 KiB, 8 KiB apart: data sieving reads one 1 MiB window into its buffer,
    # posix reads the 64 regions into the array
    a = access(False, (1 << 19,), (64,), (64,), ((0, 1 << 20),), total=1 << 20)
    assert m.predict("sieving", a).seconds == pytest.approx(1e-6 + (1 << 20) * 1e-10, rel=1e-12)
    assert m.predict("posix", a).seconds == pytest.approx(64e-6 + (1 << 19) * 1e-9, rel=1e-12)


def test_byte_cost_depends_on_request_size():
    m = model(call_r=1e-6, byte_r__4096=7e-10, byte_r__65536=1.4e-9)
    a = access(False, (32768,), (2,), (2,), ((0, 32768),), total=32768)
    # two 16 KiB requests: per byte 1/2 * 0.7 ns + 1/2 * 1.4 ns = 1.05 ns
    assert m.predict("posix", a).seconds == pytest.approx(2e-6 + 32768 * 1.05e-9, rel=1e-12)


def test_list_io_is_one_call_and_a_region_walk():
    m = model(base_list_w=1e-4, call_w=1e-5, list_w=1e-6, byte_w__4096=1e-9)
    a = access(True, (64, 64), (8, 8), (8, 8), ((0, 1016), (8, 1024)))
    assert m.predict("list", a).seconds == pytest.approx(1e-4 + 1e-5 + 8e-6 + 64e-9, rel=1e-12)


def test_sieving_write_takes_turns_when_windows_with_holes_overlap():
    m = model(base_sieving_w=1e-4, sync=2e-5, elem=1e-8, copy=1e-10, call_w=1e-6, call_r=5e-7, window=3e-6,
              byte_w__4096=1e-9, buf_r=5e-10, byte_r__4096=7e-9, hole_w=4e-6)
    a = access(True, (64, 64), (8, 8), (8, 8), ((0, 120), (8, 128)))
    # per rank: one 120-byte window read and written whole, 8 elements copied; the window's
    # one page is new (made from a hole by the first turn: half a page each)
    per_rank = 3e-6 + 8 * 1e-8 + 64 * 1e-10 + 1e-6 + 5e-7 + 0.5 * 4e-6
    assert per_rank == pytest.approx(6.5864e-6, rel=1e-12)
    pred = m.predict("sieving", a)
    assert pred.seconds == pytest.approx(2 * per_rank + 1e-4 + 2 * 2e-5, rel=1e-12)  # two turns


def test_sieving_read_of_far_apart_regions_skips_the_holes():
    m = model(call_r=1e-6, window=2e-6, byte_r__4096=1e-9)
    # 4 regions of 64 B spread over 3 MiB: holes of ~1 MiB, larger than the 32 KiB gap: a window each
    a = access(False, (256,), (4,), (4,), ((0, 3 << 20),), total=3 << 20)
    assert m.predict("sieving", a).seconds == pytest.approx(4e-6 + 8e-6 + 256e-9, rel=1e-12)


def test_datatype_writes_over_other_ranks_regions_overlap_their_windows_not_their_time():
    m = model(nprocs=4, cores=2, base_datatype_w=3e-4, call_r=1e-6, call_w=2e-6, copy=1e-10, ds_w=1e-7, lock=1e-5,
              hole_w=4e-6)
    a = access(True, (64,) * 4, (8,) * 4, (8,) * 4, tuple((8 * r, 8 * r + 232) for r in range(4)))
    # each rank reads its 232-byte window (a quarter of its one page is its to make from a
    # hole), patches 8 regions, writes it back; ROMIO's window locks pipeline the ranks, so
    # the slowest rank sets the time
    per_rank = 1e-6 + 2e-6 + 64 * 1e-10 + 8 * 1e-7 + 1e-5 + 0.25 * 4e-6
    assert m.predict("datatype", a).seconds == pytest.approx(per_rank + 3e-4, rel=1e-12)


def test_servers_read_packs_exchanges_and_serves_a_chunk_each():
    m = model(base_servers_r=1e-3, sync=1e-4, run=2e-8, copy=1e-10, exchange_r=3e-10, call_r=1e-6,
              buf_r=5e-10)
    a = access(False, (4096, 4096), (1, 1), (1, 1), ((0, 8192), (0, 8192)), total=8192)
    # each rank: its one run of 512 elements packed and exchanged, plus a 4096-byte chunk
    # served (read, and the one run of it unpacked)
    per_rank = 2 * 2e-8 + 8192 * 1e-10 + 4096 * 3e-10 + 1e-6 + 4096 * 5e-10
    assert m.predict("servers", a, {"sdm_shm": "disable"}).seconds == pytest.approx(per_rank + 1e-3 + 1e-4,
                                                                                      rel=1e-12)


def test_servers_in_shared_memory_copy_once_and_pay_two_barriers_per_round():
    m = model(base_servers_r=1e-3, sync=1e-4, run=2e-8, copy=1e-10, exchange_r=9e-10, shm=3e-10, call_r=1e-6,
              buf_r=5e-10)
    a = access(False, (4096, 4096), (1, 1), (1, 1), ((0, 8192), (0, 8192)), total=8192)
    # each rank: its one run of 512 elements copied once, out of the servers' slabs (shm,
    # not MPI messages: no packing, no unpacking by the server), plus its 4096-byte chunk
    # read; one round, two barriers
    per_rank = 2e-8 + 4096 * 3e-10 + 1e-6 + 4096 * 5e-10
    assert m.predict("servers", a).seconds == pytest.approx(per_rank + 1e-3 + 2 * 1e-4, rel=1e-12)


def test_numpy_copies_pay_per_single_element_or_per_longer_run():
    m = model(base_servers_r=1e-3, elem=2e-9, run=5e-8, shm=3e-10)
    # the same 4096 bytes per rank as 512 runs of one element (numpy's inner loop copies
    # them one by one), as one run of 512, or as 64 runs of 8 (an outer iteration each)
    scattered = access(False, (4096, 4096), (512, 512), (512, 512), ((0, 8184), (8, 8192)), total=8192)
    whole = access(False, (4096, 4096), (1, 1), (1, 1), ((0, 4096), (4096, 8192)), total=8192)
    rows = access(False, (4096, 4096), (64, 64), (64, 64), ((0, 8128), (64, 8192)), total=8192)
    assert m.predict("servers", scattered).seconds == pytest.approx(1e-3 + 512 * 2e-9 + 4096 * 3e-10, rel=1e-12)
    assert m.predict("servers", whole).seconds == pytest.approx(1e-3 + 5e-8 + 4096 * 3e-10, rel=1e-12)
    assert m.predict("servers", rows).seconds == pytest.approx(1e-3 + 64 * 5e-8 + 4096 * 3e-10, rel=1e-12)


def test_noncontiguous_memory_costs_mpi_packing_per_block_and_byte():
    m = model(base_datatype_w=1e-4, call_w=1e-6, pack=2e-8, pack_byte=3e-10, byte_w__4096=1e-9)
    a = Access(writing=True, level=3, itemsize=8, total_bytes=1024, rank_bytes=(512,), rank_regions=(1,),
               rank_segments=(64,), rank_spans=((0, 512),), rank_memory=(64,))
    # file contiguous: one call of 512 B, the 64 memory blocks (512 B) gathered by MPI first
    assert m.predict("datatype", a).seconds == pytest.approx(1e-4 + 1e-6 + 64 * 2e-8 + 512 * 3e-10 + 512e-9,
                                                             rel=1e-12)
    # contiguous memory is not packed
    one = dataclasses.replace(a, rank_memory=(1,), rank_segments=(1,))
    assert m.predict("datatype", one).seconds == pytest.approx(1e-4 + 1e-6 + 512e-9, rel=1e-12)


def test_collective_without_interleaving_is_independent_io():
    m = model(base_collective_w=5e-4, base_datatype_w=1e-4, call_w=1e-6, byte_w__4096=1e-9, coll_check=3e-5)
    a = access(True, (1024, 1024), (1, 1), (1, 1), ((0, 1024), (1024, 2048)), total=2048)
    # ROMIO gathers the ranks' offset ranges, finds no interleaving and writes independently
    # through the view: datatype I/O's costs, and the check
    assert m.predict("collective", a).seconds == pytest.approx(1e-4 + 1e-6 + 1024e-9 + 3e-5, rel=1e-12)
    assert m.predict("collective", a).seconds == pytest.approx(m.predict("datatype", a).seconds + 3e-5, rel=1e-12)


def test_collective_interleaved_goes_through_one_aggregator():
    m = model(base_collective_r=1e-4, base_collective_w=2e-4, copy=1e-10, coll_region_r=2e-7,
              coll_region_w=3e-7, exchange_r=1e-9, exchange_w=1.5e-9, call_r=3e-6, buf_r=1e-9, page_w=1e-6, byte_w__4096=2e-9)
    a = access(False, (512, 512), (64, 64), (64, 64), ((0, 1016), (8, 1024)))
    # the aggregator: its own 512 bytes copied, the 128 regions of both ranks, all 1024
    # bytes exchanged, the 1024-byte span read in one call into its buffer
    aggregator = 512 * 1e-10 + 128 * 2e-7 + 1024 * 1e-9 + 3e-6 + 1024 * 1e-9
    assert m.predict("collective", a).seconds == pytest.approx(1e-4 + aggregator, rel=1e-12)
    # writing, a region costs more (ROMIO merges the offsets to find holes), a byte moves
    # at the write's exchange cost; the span is written (one call, zero cost here) into
    # one new page in requests of 1024 B
    aggregator = 512 * 1e-10 + 128 * 3e-7 + 1024 * 1.5e-9 + 1e-6 + 1024 * 2e-9
    w = dataclasses.replace(a, writing=True)
    assert m.predict("collective", w).seconds == pytest.approx(2e-4 + aggregator, rel=1e-12)


def test_an_aggregator_works_alone_while_the_other_ranks_wait():
    consts = dict(coll_region_r=2e-7, exchange_r=1e-9, call_r=3e-6, buf_r=1e-9)
    # four ranks, 8-byte regions interleaved over 2 KiB: one aggregator (cb_nodes 1) handles
    # all 256 regions, moves all 2048 bytes to the ranks and reads the 2048-byte span in one call
    a = access(False, (512,) * 4, (64,) * 4, (64,) * 4, tuple((8 * r, 8 * r + 2024) for r in range(4)), total=2048)
    shared, alone = 256 * 2e-7 + 2048 * 1e-9 + 2048 * 1e-9, 3e-6
    # measured with 4 ranks busy on 2 cores (contention 2); calling alone it has a core to
    # itself; copying cached pages (buf_r) is bound by memory, which the waiting ranks do not use
    assert model(nprocs=4, cores=2, **consts).predict("collective", a).seconds == pytest.approx(shared + alone / 2,
                                                                                                rel=1e-12)
    # with a core per rank there is no contention to be spared
    assert model(nprocs=4, cores=4, **consts).predict("collective", a).seconds == pytest.approx(shared + alone,
                                                                                                rel=1e-12)


def test_a_new_handles_first_collective_write_touches_its_buffer():
    m = model(nprocs=2, cores=2, fault=2e-6, page_w=1e-6)
    # two ranks interleaved over 64 KiB: the aggregator's 16 MiB buffer is touched over
    # 16 pages (what the span needs), apart from the access itself (16 new file pages)
    a = access(True, (32768, 32768), (4096, 4096), (4096, 4096), ((0, 65528), (8, 65536)), total=65536)
    assert m.new_handle("collective", a) == pytest.approx(16 * 2e-6, rel=1e-12)
    assert m.predict("collective", a).seconds == pytest.approx(16 * 1e-6, rel=1e-12)
    # a 4 KiB buffer (a hint) is touched over one page
    assert m.new_handle("collective", a, {"cb_buffer_size": 4096}) == pytest.approx(2e-6, rel=1e-12)
    # reads, other methods and rank spans that do not overlap (independent I/O) use no buffer
    assert m.new_handle("collective", dataclasses.replace(a, writing=False)) == 0.0
    assert m.new_handle("datatype", a) == 0.0
    apart = access(True, (32768, 32768), (1, 1), (1, 1), ((0, 32768), (32768, 65536)), total=65536)
    assert m.new_handle("collective", apart) == 0.0


def test_servers_with_holes_read_them_and_only_busy_servers_work():
    m = model(nprocs=4, cores=2, call_r=1e-6, call_w=2e-6, hole_w=7e-6, shm=1e-9)
    # two ranks' 4 KiB, 4 KiB apart (a 12 KiB span): 16 MiB buffers, so with 4 servers of
    # 3 rows of 4 KiB each takes one row; each row-chunk (one page) is read (a hole), patched
    # and written back; three of four servers busy, contention max(1, 3/2) / 2
    a = Access(writing=True, level=3, itemsize=8, total_bytes=12288, rank_bytes=(4096, 4096, 0, 0),
               rank_regions=(1, 1, 0, 0), rank_segments=(1, 1, 0, 0),
               rank_spans=((0, 4096), (8192, 12288), (0, 0), (0, 0)), row_bytes=4096)
    server = (1e-6 + 2e-6 + 1 * 7e-6) * 1.5 / 2
    assert m.predict("servers", a).seconds == pytest.approx(4096 * 1e-9 + server, rel=1e-12)


def test_constants_scale_with_cpu_contention_for_other_rank_counts():
    m = model(nprocs=2, cores=2, base_posix_w=1e-3, call_w=1e-6, open=5e-4)
    a = access(True, (8,) * 8, (1,) * 8, (1,) * 8, tuple((8 * r, 8 * r + 8) for r in range(8)), total=64)
    # 8 ranks on 2 cores: 4 times the contention of the calibration's 2 ranks
    assert m.predict("posix", a).seconds == pytest.approx(4 * (1e-3 + 1e-6), rel=1e-12)
    assert m.scaled(8)["open"] == 5e-4  # measured directly: not scaled


def test_predictor_totals_per_organization_level():
    m = model(nprocs=1, cores=1, base_posix_w=1e-4, call_w=1e-6, byte_w__4096=1e-9, commit=1e-3, fsync=2e-3,
              fsync_byte=1e-8, open=5e-4, checksum_byte=1e-9, first_w=3e-3, first_r=7e-4, session_r=2e-3)
    w = Workload(shape=(16,), dtype="f8", distribution="block", datasets=2, every=5, iterations=20, ranks=1)
    result = predict(w, m)
    row = next(r for r in result["rows"] if r["method"] == "posix")
    # method: base + one call + 128 bytes; SDM: commit + checksum of 128 bytes + sync of 128 bytes
    per_write = (1e-4 + 1e-6 + 128e-9) + (1e-3 + 128e-9 + 2e-3 + 128 * 1e-8)
    assert row["per_write"] == pytest.approx(per_write, rel=1e-12)
    assert w.writes == 8
    first = 2 * 3e-3  # each of the 2 datasets' first write
    assert row["total"][1] == pytest.approx(8 * per_write + 8 * 5e-4 + first, rel=1e-12)  # a file per write
    assert row["total"][2] == pytest.approx(8 * per_write + 2 * 5e-4 + first, rel=1e-12)  # a file per dataset
    assert row["total"][3] == pytest.approx(8 * per_write + 1 * 5e-4 + first, rel=1e-12)  # one file
    assert math.isclose(result["rows"][-1]["total"][3], min(r["total"][3] for r in result["rows"][:-1]),
                        rel_tol=1e-12)  # auto takes the fastest write method
    # read back once: 8 reads (lookup 0 here: only the method), each step's file opened again,
    # the run's first read (2 ms) and each dataset's (0.7 ms)
    m2 = model(nprocs=1, cores=1, base_posix_r=2e-4, call_r=1e-6, byte_r__4096=5e-10, lookup=1e-3, open=5e-4,
               first_r=7e-4, session_r=2e-3)
    r = Workload(shape=(16,), dtype="f8", distribution="block", datasets=2, every=5, iterations=20, ranks=1, reads=1)
    row = next(x for x in predict(r, m2)["rows"] if x["method"] == "posix")
    per_read = (2e-4 + 1e-6 + 128 * 5e-10) + 1e-3
    assert row["per_read"] == pytest.approx(per_read, rel=1e-12)
    assert row["total"][1] == pytest.approx(8 * per_read + 2 * 8 * 5e-4 + 2e-3 + 2 * 7e-4, rel=1e-12)
    assert row["total"][3] == pytest.approx(8 * per_read + 2 * 1 * 5e-4 + 2e-3 + 2 * 7e-4, rel=1e-12)


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


def test_a_new_handles_first_collective_write_is_paid_per_file_held_open():
    m = model(nprocs=2, cores=2, fault=2e-6, open=1e-3)
    w = Workload(shape=(2048,), dtype="f8", distribution="cyclic", datasets=3, every=1, iterations=4, ranks=2,
                 reads=0, sync=False)
    row = next(r for r in predict(w, m)["rows"] if r["method"] == "collective")
    # 16 KiB interleaved by two ranks: the aggregator's buffer is touched over 4 pages
    assert row["per_held_file"] == pytest.approx(4 * 2e-6, rel=1e-12)
    # level 1 opens 12 files one after the other (one buffer, reused), level 2 holds 3 open, level 3 one
    assert row["total"][1] - row["total"][3] == pytest.approx((12 - 1) * 1e-3, rel=1e-9)
    assert row["total"][2] - row["total"][3] == pytest.approx((3 - 1) * (1e-3 + 4 * 2e-6), rel=1e-9)


def test_a_calibration_stored_before_a_split_serves_both_directions():
    record = {"id": 7, "nprocs": 4, "constants": {"version": 1, "nprocs": 4, "cores": 2, "romio": {},
                                                  "constants": {"exchange": 4e-10, "coll_region": 1e-7, "copy": 2e-10}}}
    m = CostModel.from_calibration(record)
    assert (m.constants["exchange_w"], m.constants["exchange_r"]) == (4e-10, 4e-10)
    assert (m.constants["coll_region_w"], m.constants["coll_region_r"]) == (1e-7, 1e-7)
    assert m.constants["copy"] == 2e-10 and m.calibrated
    # a newer record's own split values win over an old name stored beside them
    record["constants"]["constants"] = {"exchange": 4e-10, "exchange_r": 6e-10}
    m = CostModel.from_calibration(record)
    assert (m.constants["exchange_w"], m.constants["exchange_r"]) == (4e-10, 6e-10)


def test_a_calibration_stored_before_a_size_node_predicts_as_it_did():
    # stored with byte costs at 4 KiB and 512 KiB only: the 64 KiB node is their log-linear
    # mix (4/7 of the way), so a 64 KiB request costs what the old interpolation gave
    old = {"byte_r@4096": 7e-10, "byte_r@524288": 1.4e-9, "byte_r@16777216": 2e-10, "call_r": 1e-6}
    m = CostModel.from_calibration({"nprocs": 2, "constants": {"nprocs": 2, "cores": 2, "constants": old}})
    assert m.constants["byte_r@65536"] == pytest.approx(3 / 7 * 7e-10 + 4 / 7 * 1.4e-9, rel=1e-12)
    assert m.constants["byte_w@65536"] == DEFAULTS["byte_w@65536"]  # no write sizes stored: the default
