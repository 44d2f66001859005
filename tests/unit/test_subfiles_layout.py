"""Subfiled groups without MPI: how a step is cut, what the subfiles are called, the checks, "auto" and the checksums.

References are built here from the documented rules (numpy, the ``xxhash`` package), not from SDM.
"""

from __future__ import annotations

import numpy as np
import pytest
import xxhash

from sdm import integrity
from sdm.errors import HintError, InvalidArgumentError
from sdm.planner.subfiles import MIN_BYTES, choose_subfiles
from sdm.storage.subfiles import ALIGN, Extent, check_subfiles, cut, subfile_path

MiB = 1 << 20


def _block_rows(rows: int, k: int) -> list[tuple[int, int]]:
    """Rows split as sdm.Block splits them: numpy's array_split (the first ``rows % k`` one longer)."""
    parts = np.array_split(np.arange(rows), k)
    return [(int(p[0]), int(p[-1]) + 1) for p in parts]


# ----------------------------------------------------------------------------- cut


@pytest.mark.parametrize("shape, order", [((7, 5, 3), "C"), ((7, 5, 3), "F"), ((10,), "C"), ((4, 9), "F"),
                                          ((1, 6), "C"), ((6, 1), "F")])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8, 100])
def test_cut_follows_the_block_split_of_the_slowest_dimension(shape, order, k):
    itemsize = 8
    slow = 0 if order == "C" else len(shape) - 1
    rows = shape[slow]
    per_row = int(np.prod(shape)) // rows * itemsize
    expect = [Extent(r, r[0] * per_row, (r[1] - r[0]) * per_row) for r in _block_rows(rows, min(k, rows))]
    got = cut(shape, itemsize, order, k)
    assert got == expect
    assert len(got) == min(k, rows)  # capped: never more extents than rows
    # the extents tile the stream in order
    assert got[0].start == 0 and sum(e.nbytes for e in got) == int(np.prod(shape)) * itemsize
    assert all(a.start + a.nbytes == b.start for a, b in zip(got, got[1:]))


def test_cut_one_extent_and_one_per_row():
    assert cut((7, 5, 3), 4, "C", 1) == [Extent((0, 7), 0, 7 * 5 * 3 * 4)]
    assert cut((7, 5, 3), 4, "C", 7) == [Extent((r, r + 1), r * 60, 60) for r in range(7)]
    assert cut((7, 5, 3), 4, "C", 8) == cut((7, 5, 3), 4, "C", 7)


def test_cut_uneven_split_first_rows_longer():
    # 7 rows in 3: 3, 2, 2 (the first 7 % 3 = 1 one longer); a row of (7, 5) f8 is 40 bytes
    assert cut((7, 5), 8, "C", 3) == [Extent((0, 3), 0, 120), Extent((3, 5), 120, 80), Extent((5, 7), 200, 80)]
    # 10 rows in 4: 3, 3, 2, 2
    assert [e.rows for e in cut((10,), 2, "C", 4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]


def test_cut_fortran_order_slowest_dimension_is_the_last():
    # F order: the slab a[..., r0:r1] is contiguous; its rows are the last dimension's
    got = cut((2, 3, 5), 8, "F", 2)
    assert got == [Extent((0, 3), 0, 3 * 48), Extent((3, 5), 3 * 48, 2 * 48)]
    a = np.arange(30, dtype="f8").reshape((2, 3, 5), order="F")
    stream = a.tobytes(order="F")
    for e in got:
        assert stream[e.start:e.start + e.nbytes] == a[..., e.rows[0]:e.rows[1]].tobytes(order="F")
    # the same shape in C order is cut along its first dimension (2 rows)
    assert [e.rows for e in cut((2, 3, 5), 8, "C", 5)] == [(0, 1), (1, 2)]


def test_cut_scalar_and_empty_shapes():
    assert cut((), 8, "C", 4) == [Extent((0, 1), 0, 8)]  # a 0-d dataset is one row
    assert cut((), 2, "F", 1) == [Extent((0, 1), 0, 2)]
    for shape in [(0,), (0, 5), (5, 0), (3, 0, 2)]:
        for order in "CF":
            assert cut(shape, 8, order, 3) == []


# ----------------------------------------------------------------------------- names and alignment


def test_subfile_path_names():
    assert subfile_path("g.sdm", 0) == "g.sub00000.sdm"
    assert subfile_path("app/run-000001-x/fields.sdm", 3) == "app/run-000001-x/fields.sub00003.sdm"
    assert subfile_path("a/fields.s000010-000019.sdm", 12) == "a/fields.s000010-000019.sub00012.sdm"
    assert subfile_path("g.sdm", 123456) == "g.sub123456.sdm"
    assert subfile_path("g.sdm", np.int64(2)) == "g.sub00002.sdm"


def test_the_default_alignment_is_a_page():
    assert ALIGN == 4096


# ----------------------------------------------------------------------------- checks

BAD_VALUE = "subfiles must be a positive integer, 'auto' or None, got {!r}"
LEVEL_1 = ("subfiles apply to levels 2 and 3 (extents appended to subfiles); level 1 writes a file per dataset and "
           "step")
ARCHIVE = ("subfiles apply to the fast tier; the archive tier writes one object per dataset and step (subfiled "
           "groups migrate to it as files)")


@pytest.mark.parametrize("value", [0, -1, -2, 1.5, 2.0, True, False, np.bool_(True), "x", "many", "4", [2], b"auto"])
def test_check_subfiles_refuses_bad_values(value):
    with pytest.raises(InvalidArgumentError) as info:
        check_subfiles(value, 3, False)
    assert str(info.value) == BAD_VALUE.format(value)


def test_check_subfiles_levels_tiers_and_good_values():
    assert check_subfiles(None, 1, True) is None  # nothing asked: nothing to check
    assert check_subfiles(None, 3, False) is None
    assert check_subfiles("auto", 3, False) == 0
    assert check_subfiles(1, 2, False) == 1
    assert check_subfiles(np.int32(5), 3, False) == 5
    assert type(check_subfiles(np.int64(5), 3, False)) is int
    for value in (1, 4, "auto"):
        with pytest.raises(InvalidArgumentError) as info:
            check_subfiles(value, 1, False)
        assert str(info.value) == LEVEL_1
        with pytest.raises(InvalidArgumentError) as info:
            check_subfiles(value, 3, True)
        assert str(info.value) == ARCHIVE
    with pytest.raises(InvalidArgumentError) as info:  # the value is checked first
        check_subfiles(0, 1, True)
    assert str(info.value) == BAD_VALUE.format(0)


# ----------------------------------------------------------------------------- "auto"


def test_choose_subfiles_explicit_k():
    assert choose_subfiles(3, 4096, 4, 1, {}, "ext4") == (3, "subfiles=3 (the group's) on ext4, 1.0 KiB per rank")
    assert choose_subfiles(5, 100, 1, 1, {}) == (5, "subfiles=5 (the group's), 100 B per rank")
    # the group's K wins over the hints (which are then not even read)
    assert choose_subfiles(2, 8 * MiB, 4, 1, {"sdm_subfile_min": "bad"})[0] == 2


def test_choose_subfiles_one_rank_keeps_one_file():
    assert choose_subfiles(0, 64 * MiB, 1, 1, {}, "tmpfs") == (0, "auto: one shared file (one rank on tmpfs)")
    assert choose_subfiles(0, 64 * MiB, 1, 1, {}) == (0, "auto: one shared file (one rank)")


def test_choose_subfiles_small_pieces_keep_one_file():
    k, reason = choose_subfiles(0, 1000, 2, 1, {}, "ext4")
    assert k == 0
    assert reason == ("auto: one shared file (500 B per rank < sdm_subfile_min 1.0 MiB: small pieces do not repay a "
                      "file, a catalog row and a sync each on ext4)")
    assert choose_subfiles(0, 4 * MIN_BYTES - 4, 4, 1, {})[0] == 0  # one byte per rank short
    assert choose_subfiles(0, 0, 4, 1, {})[0] == 0
    k, reason = choose_subfiles(0, 3 * MiB, 2, 1, {"sdm_subfile_min": "2m"})
    assert (k, reason.split(" (")[0]) == (0, "auto: one shared file")
    assert "1.5 MiB per rank < sdm_subfile_min 2.0 MiB" in reason


def test_choose_subfiles_one_per_rank():
    assert choose_subfiles(0, 4 * MIN_BYTES, 4, 1, {}) == (
        4, "auto: one subfile per rank (4 ranks on 1 node(s), 1.0 MiB per rank >= 1.0 MiB: no two writers share a "
           "file)")
    k, reason = choose_subfiles(0, 30, 3, 1, {"sdm_subfile_min": "1"}, "tmpfs")
    assert k == 3
    assert reason == ("auto: one subfile per rank (3 ranks on 1 node(s), 10 B per rank >= 1 B on tmpfs: no two "
                      "writers share a file)")


def test_choose_subfiles_per_node_hint():
    k, reason = choose_subfiles(0, 8 * 2 * MiB, 8, 2, {"sdm_subfiles_per_node": "1"})
    assert k == 2
    assert reason == "auto: 2 subfiles (sdm_subfiles_per_node=1 on 2 node(s); 2.0 MiB per rank)"
    assert choose_subfiles(0, 4 * 2 * MiB, 4, 2, {"sdm_subfiles_per_node": 3})[0] == 4  # capped at the ranks
    assert choose_subfiles(0, 4 * 2 * MiB, 4, 1, {"sdm_subfiles_per_node": "0"})[0] == 4  # 0: one per rank


@pytest.mark.parametrize("hints", [{"sdm_subfile_min": "0"}, {"sdm_subfile_min": "x"},
                                   {"sdm_subfiles_per_node": "-1"}, {"sdm_subfiles_per_node": "two"}])
def test_choose_subfiles_bad_hints(hints):
    key, raw = next(iter(hints.items()))
    minimum = 1 if key == "sdm_subfile_min" else 0
    with pytest.raises(HintError) as info:
        choose_subfiles(0, 8 * MiB, 4, 1, hints)
    assert str(info.value) == f"hint {key}={raw!r} must be an integer >= {minimum} (suffixes k, m, g allowed)"


# ----------------------------------------------------------------------------- checksums


@pytest.mark.parametrize("data", [b"", b"a", bytes(range(256)) * 37, np.arange(1000, dtype="<f8").tobytes()])
def test_xxh3_is_the_xxhash_package(data):
    assert integrity.xxh3(data) == xxhash.xxh3_64_intdigest(data)
    assert integrity.xxh3(memoryview(data)) == xxhash.xxh3_64_intdigest(data)
    assert integrity.checksum_of_bytes(data, "u1", integrity.XXH3) == f"{xxhash.xxh3_64_intdigest(data):016x}"


def test_xxh3_of_arrays_hashes_their_memory_bytes():
    a = np.arange(60, dtype="<f8").reshape(3, 4, 5)
    assert integrity.xxh3(a) == xxhash.xxh3_64_intdigest(a.tobytes(order="C"))
    f = np.asfortranarray(a)
    assert integrity.xxh3(f) == xxhash.xxh3_64_intdigest(a.tobytes(order="F"))  # its memory order
    assert integrity.xxh3(np.arange(7, dtype=">i4")) == xxhash.xxh3_64_intdigest(np.arange(7, dtype=">i4").tobytes())
    with pytest.raises(InvalidArgumentError) as info:
        integrity.xxh3(a[:, ::2])
    assert str(info.value) == "an extent's checksum needs its bytes contiguous in memory"


def _documented_extents(raw: bytes, cuts: list[int]) -> str:
    """``xxh3-64-extents`` as the documentation of sdm.integrity writes it."""
    ends = cuts[1:] + [len(raw)]
    digests = [xxhash.xxh3_64_intdigest(raw[a:b]) for a, b in zip(cuts, ends)]
    return f"{xxhash.xxh3_64_intdigest(np.array(digests, '<u8').tobytes()):016x}"


@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_extents_checksum_is_the_documented_formula(k):
    a = np.random.default_rng(k).standard_normal((7, 5, 3))
    raw = a.tobytes()
    cuts = [e.start for e in cut(a.shape, 8, "C", k)]
    digests = [xxhash.xxh3_64_intdigest(raw[a0:b0]) for a0, b0 in zip(cuts, cuts[1:] + [len(raw)])]
    assert integrity.extents_checksum(digests) == _documented_extents(raw, cuts)
    assert integrity.EXTENTS == "xxh3-64-extents" and integrity.XXH3 == "xxh3-64"


def test_extents_checksum_order_and_width():
    d = [xxhash.xxh3_64_intdigest(b"x"), xxhash.xxh3_64_intdigest(b"y")]
    assert integrity.extents_checksum(d) != integrity.extents_checksum(d[::-1])
    assert integrity.extents_checksum([]) == f"{xxhash.xxh3_64_intdigest(b''):016x}"
    top = (1 << 64) - 1
    assert integrity.extents_checksum([top]) == "%016x" % xxhash.xxh3_64_intdigest(bytes([255] * 8))
    assert len(integrity.extents_checksum([0])) == 16
