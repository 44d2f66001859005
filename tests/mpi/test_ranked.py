"""Ranked sections (``sdm.Ranked``): every rank writes its own number of rows.

Every value read back and every stored byte is compared with references built here
with numpy and ``struct`` alone: the whole table of one step (the rows of all ranks in
rank order), the header laid out as docs/format.md says, and the ``mix64-v2`` checksum
of the stored bytes computed by the formula of :mod:`sdm.integrity`'s documentation.
Reads: own rows under the writer's rank count, a balanced share on a smaller
communicator, rank ranges, the whole step on one process.  Bad inputs: the exact
message on every rank, and nothing written, lost or changed.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import sdm
from mpi4py import MPI
from sdm.catalog import Catalog
from sdm.errors import (
    CollectiveMismatchError,
    DistributionError,
    IntegrityError,
    InvalidArgumentError,
    LocalArrayError,
    StepExistsError,
)
from sdm.maintenance import verify_run

from _reference import mix64

RANK0 = " [rank 0]" if MPI.COMM_WORLD.Get_size() > 1 else ""
ROW = (3,)


def _counts(size, step, seed=0):
    """Row counts of every rank at one step (the same on every rank); some ranks give none."""
    counts = np.random.default_rng([seed, step, size]).integers(0, 5, size)
    if size > 1:
        counts[(step + 1) % size] = 0  # a zero-row rank at every step
    return [int(c) for c in counts]


def _table(counts, step, dtype="f8", row=ROW):
    """The whole step: the rows of all ranks in rank order (every value differs)."""
    total = sum(counts)
    return (np.arange(total * int(np.prod(row)), dtype="f8").reshape((total, *row)) * 0.5 + 1000.0 * step).astype(dtype)


def _mine(table, counts, rank):
    start = sum(counts[:rank])
    return table[start:start + counts[rank]]


def _header_reference(counts, row_bytes, itemsize):
    """The header as docs/format.md describes it, built field by field."""
    n = len(counts)
    fields = np.array([0, n, sum(counts), max(counts, default=0), row_bytes, *counts], dtype="<u8")
    unit = int(np.lcm(8, itemsize))
    length = -(-(8 + fields.nbytes) // unit) * unit
    fields[0] = length
    return (b"SDMRANK1" + fields.tobytes()).ljust(length, b"\x00")


def _stored(url, run_id, group, name):
    """Rank 0: every committed step of a dataset as (bytes at the catalog's offset, checksum)."""
    cat = Catalog(url, create=False)
    try:
        run = cat.run(run_id)
        root = Path(run.root)
        ds = cat.group(run_id, group).dataset(name)
        out = {}
        for step in ds.steps:
            w = cat.lookup_write(ds.id, step)
            with open(root / w.path, "rb") as f:
                f.seek(w.offset)
                out[step] = (f.read(w.nbytes), w.checksum)
        return out
    finally:
        cat.close()


def _clean(url, run_id):
    """Rank 0: ``sdm verify`` finds every row whole."""
    cat = Catalog(url, create=False)
    try:
        report = verify_run(cat, run_id)
        assert report.problems == [], report.problems
    finally:
        cat.close()


@pytest.mark.parametrize("level", [1, 2, 3])
def test_round_trip(comm, mpi_tmp, level):
    """Random counts (zero-row ranks, an all-zero step): own rows, ranges, header and row bytes, checksum."""
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/cat.db"
    steps = {0: _counts(size, 0), 1: _counts(size, 1), 2: [0] * size, 3: _counts(size, 3)}
    with sdm.open("ranked", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("particles", ["x", "grid"], dtype="f8", shape=ROW, level=level)
        g.data_view(sdm.Ranked(), ["x"])
        for step, counts in steps.items():
            g.write("x", step, _mine(_table(counts, step), counts, rank))
        g.write("grid", 0, np.zeros(g.local_shape("grid")))  # a block dataset beside it
        for step, counts in steps.items():
            got = g.read("x", step, verify=True)
            assert got.dtype == np.float64 and got.shape == (counts[rank], *ROW)
            assert got.tobytes() == _mine(_table(counts, step), counts, rank).tobytes()
            facts = g.ranked_counts("x", step)
            assert (facts.counts, facts.total, facts.largest, facts.nranks) == \
                (tuple(counts), sum(counts), max(counts), size)
            # a range of writer ranks, each rank its own
            a, b = rank // 2, min(size, rank // 2 + 2)
            part = g.read("x", step, ranks=(a, b), verify=True)
            start = sum(counts[:a])
            assert part.tobytes() == _table(counts, step)[start:start + sum(counts[a:b])].tobytes()
        assert g.steps("x") == sorted(steps)
        run_id = s.run_id
    if rank == 0:
        stored = _stored(url, run_id, "particles", "x")
        for step, counts in steps.items():
            raw, checksum = stored[step]
            head = _header_reference(counts, 24, 8)
            assert raw[:len(head)] == head
            assert raw[len(head):] == _table(counts, step).tobytes()
            assert checksum == f"{mix64(raw, 8):016x}"
        _clean(url, run_id)
    # one process reads it whole, without a data view (the catalog says ranked)
    if rank == 0:
        with sdm.open("ranked", "r", comm=MPI.COMM_SELF, catalog=url, run=run_id) as r:
            rg = r.group("particles")
            for step, counts in steps.items():
                assert rg.read("x", step, verify=True).tobytes() == _table(counts, step).tobytes()
            if size > 1:
                assert rg.read("x", 1, ranks=(1, size)).tobytes() == _table(steps[1], 1)[steps[1][0]:].tobytes()
    comm.Barrier()


def test_balanced_share_on_fewer_ranks(comm, mpi_tmp):
    """Readers on another rank count get the rows split as evenly as possible, in order; verified whole."""
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/cat.db"
    counts = [3 * r + 1 for r in range(size)]
    table = _table(counts, 5)
    with sdm.open("ranked", root=mpi_tmp, catalog=url) as s:
        s.make_group("g", ["x"], dtype="f8", shape=ROW, view=sdm.Ranked()).write("x", 5, _mine(table, counts, rank))
        run_id = s.run_id
    readers = max(1, size - 1)
    sub = comm.Split(0 if rank < readers else MPI.UNDEFINED, rank)
    if sub != MPI.COMM_NULL:
        with sdm.open("ranked", "r", comm=sub, catalog=url, run=run_id) as r:
            got = r.group("g").read("x", 5, verify=True)
        base, extra = divmod(len(table), readers)
        start = rank * base + min(rank, extra)
        assert got.tobytes() == table[start:start + base + (rank < extra)].tobytes()
        sub.Free()
    comm.Barrier()


@pytest.mark.parametrize("dtype, row", [("c16", ()), ("i2", (2, 2)), ("S3", (1,))])
def test_header_padding_and_other_rows(comm, mpi_tmp, dtype, row):
    """Scalar rows and other dtypes: the header is padded to whole elements; `sdm verify` agrees."""
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/cat.db"
    counts = _counts(size, 7)
    table = _table(counts, 7, "i2" if dtype == "S3" else dtype, row)
    if dtype == "S3":
        table = table.astype("S3")
    itemsize = np.dtype(dtype).itemsize
    with sdm.open("ranked", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["x"], dtype=dtype, shape=row, level=2, view=sdm.Ranked())
        g.write("x", 0, _mine(table, counts, rank))
        assert g.read("x", 0, verify=True).tobytes() == _mine(table, counts, rank).tobytes()
        run_id = s.run_id
    if rank == 0:
        raw, checksum = _stored(url, run_id, "g", "x")[0]
        head = _header_reference(counts, table[:1].nbytes if len(table) else itemsize * int(np.prod(row)), itemsize)
        assert len(head) % itemsize == 0 and raw == head + table.tobytes()
        assert checksum == f"{mix64(raw, itemsize):016x}"
        _clean(url, run_id)


def test_header_fields_by_offset(comm, mpi_tmp):
    """The documented offsets: magic at 0, then uint64 length, nranks, total, max, row bytes, counts."""
    from sdm.engine.ranked import header_bytes, parse_header

    raw = header_bytes([2, 0, 5], 48, 16)  # 72 bytes of fields, padded to a multiple of 16
    assert raw[0:8] == b"SDMRANK1"
    assert struct.unpack_from("<6Q", raw, 8) == (80, 3, 7, 5, 48, 2)
    assert struct.unpack_from("<2Q", raw, 56) == (0, 5) and raw[72:80] == bytes(8) and len(raw) == 80
    facts = parse_header(raw, "x")
    assert (facts.counts, facts.total, facts.largest, facts.nranks, facts.row_bytes, facts.header) == \
        ((2, 0, 5), 7, 5, 3, 48, 80)
    assert len(header_bytes([2, 0, 5], 12, 4)) == 72
    assert header_bytes([], 8, 8) == b"SDMRANK1" + struct.pack("<5Q", 48, 0, 0, 0, 8)


def test_bad_inputs(comm, mpi_tmp):
    """Every refusal: the same message on every rank, and the stored steps unchanged."""
    rank, size = comm.Get_rank(), comm.Get_size()
    last = size - 1
    suffix = f" [rank {last}]" if size > 1 else ""
    url = f"sqlite:///{mpi_tmp}/cat.db"
    counts = _counts(size, 0)
    table = _table(counts, 0)
    mine = _mine(table, counts, rank)
    with sdm.open("ranked", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["x", "b"], dtype="f8", shape=ROW, level=3)
        with pytest.raises(LocalArrayError) as info:  # before the view: a block write of rows is refused
            g.write("x", 0, mine)
        assert "expects a local array of shape" in str(info.value)
        g.data_view(sdm.Ranked(), ["x"])
        g.write("x", 0, mine)
        cases = [
            (LocalArrayError, lambda: g.write("x", 1, np.zeros((2, 4)) if rank == last else mine),
             f"ranked dataset 'x' takes local rows of shape (n, 3) on rank {last}, got (2, 4){suffix}"),
            (LocalArrayError, lambda: g.write("x", 1, np.zeros(3) if rank == last else mine),
             f"ranked dataset 'x' takes local rows of shape (n, 3) on rank {last}, got (3,){suffix}"),
            (LocalArrayError, lambda: g.write("x", 1, np.zeros((1, 3), "f4") if rank == last else mine),
             f"ranked dataset 'x' stores float64 (<f8) but the local rows on rank {last} are float32 (<f4); "
             f"ranked rows are written in the stored dtype{suffix}"),
            (LocalArrayError, lambda: g.write("x", 1, np.array([[None] * 3], dtype=object) if rank == last else mine),
             f"the local rows of ranked dataset 'x' on rank {last} must be a numpy array of float64 (<f8){suffix}"),
            (InvalidArgumentError, lambda: g.write("x", 1, mine, casting="unsafe"),
             "casting= is not supported for ranked datasets (['x']); give the rows in the stored dtype" + RANK0),
            (InvalidArgumentError, lambda: g.write_step(1, {"x": mine, "b": np.zeros(g.local_shape("b"))}),
             "write_step cannot write ranked datasets ['x'] and other datasets ['b'] in one dump; write them in "
             "separate calls" + RANK0),
            (StepExistsError, lambda: g.write("x", 0, mine),
             f"step 0 of dataset 'x' (group 'g', run {s.run_id}) was already written; pass overwrite=True to replace it" + RANK0),
            (InvalidArgumentError, lambda: g.read("x", 0, out=np.zeros((1, 3))),
             "out= is not supported for ranked dataset 'x': the row count is known only from the stored header" + RANK0),
            (InvalidArgumentError, lambda: g.read("x", 0, dtype="f4"),
             "ranked dataset 'x' is read in its stored dtype float64 (<f8) only (no dtype= or casting=)" + RANK0),
            (InvalidArgumentError, lambda: g.read("x", 0, ranks=(0, size + 1) if rank == last else None),
             f"ranks {(0, size + 1)} go past the {size} ranks that wrote the step{suffix}"),
            (InvalidArgumentError, lambda: g.read("x", 0, ranks=(1, 0)), "ranks (1, 0) must have first <= stop" + RANK0),
            (InvalidArgumentError, lambda: g.read("x", 0, ranks="01"),
             "ranks must be a pair (first, stop) of writer ranks, got '01'" + RANK0),
            (InvalidArgumentError, lambda: g.read("b", 0, ranks=(0, 1)),
             "ranks= applies to ranked datasets only; dataset 'b' is not ranked" + RANK0),
            (InvalidArgumentError, lambda: g.ranked_counts("b", 0),
             "dataset 'b' is not ranked (set with data_view(sdm.Ranked()))"),
            (DistributionError, lambda: g.data_view(sdm.Block(), ["x"]),
             "dataset 'x' is ranked (sdm.Ranked): each rank gives its own rows, there is no global array to cut "
             "into pieces" + RANK0),
            (DistributionError, lambda: g.local_shape("x"),
             "dataset 'x' is ranked (sdm.Ranked): each rank gives its own rows, there is no global array to cut "
             "into pieces"),
            (CollectiveMismatchError, lambda: g.write("x", 5 + rank, mine),
             None),
        ]
        g.write("b", 0, np.zeros(g.local_shape("b")))
        cases.append((DistributionError, lambda: g.data_view(sdm.Ranked(), ["b"]),
                      "dataset 'b' holds steps written as one global array; it cannot become ranked (give ranked "
                      "rows a dataset of their own)" + RANK0))
        for cls, call, message in cases:
            if size == 1 and cls is CollectiveMismatchError:
                continue
            with pytest.raises(cls) as info:
                call()
            if message is not None:
                assert str(info.value) == message
            assert g.steps("x") == [0]
            assert g.read("x", 0, verify=True).tobytes() == mine.tobytes()  # nothing lost or changed
        run_id = s.run_id
    if rank == 0:
        assert set(_stored(url, run_id, "g", "x")) == {0}
        _clean(url, run_id)


def test_overwrite_append_and_damage(comm, mpi_tmp):
    """An overwrite with other counts; a later session writes without data_view; damage is found by any reader."""
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/cat.db"
    first, second = _counts(size, 0), _counts(size, 0, seed=3)
    with sdm.open("ranked", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["x"], dtype="f8", shape=ROW, level=2, view=sdm.Ranked())
        g.write("x", 0, _mine(_table(first, 0), first, rank))
        g.write("x", 0, _mine(_table(second, 9), second, rank), overwrite=True)
        run_id = s.run_id
    with sdm.open("ranked", "a", catalog=url, run=run_id) as s:
        g = s.group("g")
        g.write("x", 1, _mine(_table(first, 1), first, rank))  # ranked without a data_view: the catalog says so
        assert g.read("x", 0).tobytes() == _mine(_table(second, 9), second, rank).tobytes()
        assert g.read("x", 1).tobytes() == _mine(_table(first, 1), first, rank).tobytes()
    total = sum(second)
    if rank == 0 and total:
        cat = Catalog(url, create=False)
        ds = cat.group(run_id, "g").dataset("x")
        w = cat.lookup_write(ds.id, 0)
        path = Path(cat.run(run_id).root) / w.path
        cat.close()
        with open(path, "r+b") as f:  # the last byte of the last row
            f.seek(w.offset + w.nbytes - 1)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x40]))
    comm.Barrier()
    with sdm.open("ranked", "r", catalog=url, run=run_id) as r:
        g = r.group("g")
        if total:
            with pytest.raises(IntegrityError) as info:
                g.read("x", 0, ranks=(0, 0), verify=True)  # no rows read: still the whole step is checked
            assert "does not match its write-time checksum" in str(info.value)
        damaged = bytearray(_table(second, 9).tobytes())
        if total:
            damaged[-1] ^= 0x40
        assert g.read("x", 0, verify=False).tobytes() == bytes(damaged[24 * sum(second[:rank]):24 * sum(second[:rank + 1])])
