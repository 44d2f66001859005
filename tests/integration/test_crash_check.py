"""The crash harness's checker (``benchmarks/_crash_check.py``) on compressed rows it must call bad.

A run of group ``g`` (the crash worker's datasets: ``a`` <f8 64x48 as zstd:1:shuffle in 8
chunks, ``b`` <i4 30x50 as zstd:2:noshuffle in 6 chunks, level 3: one file) is written by this
process: steps 0 and 1, then step 1 overwritten with version 1.  The checker must call the
clean run good, and each corruption -- a flipped byte in a chunk, two chunks' places swapped in
the catalog, a zeroed chunk, a row's chunks pointed at the older version's chunks, boxes that
no longer tile the array, a chunk past the end of its file -- a bad row; a row made wholly of
the older version (its checksums too) is a lost commit instead.  The catalog is changed with
sqlite3 and the files with plain writes, as a crash or a stray writer would leave them.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import _crash_check as check  # noqa: E402  (benchmarks/_crash_check.py)
import _crash_worker as worker  # noqa: E402

pytest.importorskip("numcodecs")
pytest.importorskip("xxhash")

CODECS = {"a": ("zstd:1:shuffle", (16, 24)), "b": ("zstd:2:noshuffle", (10, 25))}  # dataset: (codec, chunks)
NCHUNKS = {"a": 8, "b": 6}


def _expected(name: str, step: int, version: int) -> np.ndarray:
    return worker.expected(worker.dataset_index(name), step, version)


class Run:
    """The written run: its catalog, the rows after the overwrite, and step 1's rows before it."""

    def __init__(self, tmp: Path) -> None:
        import sdm

        self.db = tmp / "c.db"
        self.url = f"sqlite:///{self.db}"
        self.data = tmp / "data"
        with sdm.open(worker.APP, "w", root=str(self.data), catalog=self.url) as s:
            g = s.make_group(worker.GROUP, [sdm.Dataset(n, shape=shape, dtype=t, compression=CODECS[n][0],
                                                        chunks=CODECS[n][1]) for n, t, shape in worker.DATASETS],
                             level=3)
            for step in (0, 1):
                g.write_step(step, {n: _expected(n, step, 0) for n, _, _ in worker.DATASETS})
            self.old = {r.dataset: r for r in check.load_rows(self.url) if r.step == 1}  # version 0 of step 1
            g.write_step(1, {n: _expected(n, 1, 1) for n, _, _ in worker.DATASETS}, overwrite=True)
        self.intents = check.Intents()
        for n, _, _ in worker.DATASETS:
            i = worker.dataset_index(n)
            self.intents.read([f"intent {i} 0 0 write_step", f"done {i} 0 0 write_step",
                               f"intent {i} 1 0 write_step", f"done {i} 1 0 write_step",
                               f"intent {i} 1 1 write_step", f"done {i} 1 1 write_step"], lambda k: worker.DATASETS[k][0])

    def rows(self) -> list[check.Row]:
        return check.load_rows(self.url)

    def row(self, dataset: str, step: int) -> check.Row:
        return next(r for r in self.rows() if (r.dataset, r.step) == (dataset, step))

    def check(self) -> dict[str, Any]:
        return check.check(self.rows(), self.intents, _expected)

    def bad(self) -> dict[tuple[str, int], dict[str, Any]]:
        return {(b["dataset"], b["step"]): b for b in self.check()["bad"]}

    def sql(self, statement: str, *args: Any) -> None:
        con = sqlite3.connect(self.db)
        try:
            with con:
                con.execute(statement, args)
        finally:
            con.close()

    def set_chunk(self, row: check.Row, seq: int, **values: Any) -> None:
        cols = ", ".join(f'"{k}" = ?' for k in values)
        self.sql(f"UPDATE extents SET {cols} WHERE write_id = ? AND seq = ?", *values.values(), row.id, seq)


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Run(tmp_path)


def _patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def _only(bad: dict, key: tuple[str, int], reasons: set[str]) -> dict[str, Any]:
    assert set(bad) == {key}, bad
    assert bad[key]["reason"] in reasons, bad[key]
    return bad[key]


def test_a_clean_compressed_run_is_good(run):
    rows = run.rows()
    assert len(rows) == 4 and all(r.codec == CODECS[r.dataset][0] for r in rows)
    assert all(len(r.chunks) == r.n_extents == NCHUNKS[r.dataset] for r in rows)
    assert all(r.checksum_algo == "xxh3-64-extents" and {c.checksum_algo for c in r.chunks} == {"xxh3-64"} for r in rows)
    out = run.check()
    assert out["bad"] == [] and out["lost"] == [] and out["overlap"] == []
    assert out["compressed_rows"] == 4 and out["checksums_unchecked"] == 0
    assert out["checksums_checked"] == sum(NCHUNKS[r.dataset] + 1 for r in rows)
    assert out["versions"] == 2  # step 1 of both datasets holds version 1
    # the chunks' spans are what the rows cover: their stored bytes, not offset + nbytes (the array's size)
    files = sorted({c.file for r in rows for c in r.chunks})
    assert len(files) == 1
    stored = sum(c.nbytes for r in rows for c in r.chunks)
    assert stored < sum(r.nbytes for r in rows)
    assert check.unreferenced_bytes(rows, files) == files[0].stat().st_size - stored


def test_the_checker_recomputes_the_checksums_as_sdm_does(run):
    """Its own xxh3 (the xxhash package) against the catalog's, for every chunk and row SDM wrote."""
    for r in run.rows():
        digests = []
        for c in r.chunks:
            with open(c.file, "rb") as fh:
                fh.seek(c.offset)
                digests.append(check.xxh3_hex(fh.read(c.nbytes)))
            assert digests[-1] == c.checksum
        assert check.xxh3_extents_hex(digests) == r.checksum


def test_a_flipped_byte_in_a_chunk_is_a_bad_row(run):
    r = run.row("a", 1)
    c = r.chunks[3]
    with open(c.file, "rb") as fh:
        fh.seek(c.offset + c.nbytes // 2)
        byte = fh.read(1)[0]
    _patch(c.file, c.offset + c.nbytes // 2, bytes([byte ^ 0x10]))
    b = _only(run.bad(), ("a", 1), {"checksum_mismatch", "undecodable", "no_version"})
    assert "chunk 3" in b["detail"]


def test_two_chunks_swapped_in_the_catalog_are_a_bad_row(run):
    r = run.row("b", 0)
    c0, c1 = r.chunks[0], r.chunks[1]
    run.set_chunk(r, 0, offset=c1.offset, nbytes=c1.nbytes)
    run.set_chunk(r, 1, offset=c0.offset, nbytes=c0.nbytes)
    _only(run.bad(), ("b", 0), {"checksum_mismatch", "undecodable", "no_version"})


def test_two_chunks_swapped_with_their_checksums_are_a_bad_row(run):
    """Each chunk consistent with its checksum, but in the other's box: the values are in the wrong place."""
    r = run.row("a", 0)
    c0, c1 = r.chunks[0], r.chunks[1]
    assert c0.box[1] == c1.box[1]  # same counts: both decode, to the wrong elements
    run.set_chunk(r, 0, offset=c1.offset, nbytes=c1.nbytes, checksum=c1.checksum)
    run.set_chunk(r, 1, offset=c0.offset, nbytes=c0.nbytes, checksum=c0.checksum)
    b = _only(run.bad(), ("a", 0), {"no_version"})
    assert "xxh3-64-extents" in b["detail"]  # the row's checksum says the order changed too


def test_a_zeroed_chunk_is_a_bad_row(run):
    c = run.row("b", 1).chunks[5]
    _patch(c.file, c.offset, bytes(c.nbytes))
    b = _only(run.bad(), ("b", 1), {"undecodable"})
    assert "chunk 5" in b["detail"]


def test_a_row_whose_chunks_are_the_older_versions_is_a_bad_row(run):
    """Step 1's row pointed at the chunks of version 0 (still in the file), its checksums left as they are."""
    new, old = run.row("a", 1), run.old["a"]
    for c in old.chunks:  # version 0's bytes are still there, intact
        with open(c.file, "rb") as fh:
            fh.seek(c.offset)
            assert check.xxh3_hex(fh.read(c.nbytes)) == c.checksum
    for c in old.chunks:
        run.set_chunk(new, c.seq, offset=c.offset, nbytes=c.nbytes)
    run.sql("UPDATE writes SET stored_nbytes = ? WHERE id = ?", old.stored_nbytes, new.id)
    b = _only(run.bad(), ("a", 1), {"checksum_mismatch"})
    assert "version 0" in b["detail"]


def test_a_row_wholly_of_the_older_version_is_a_lost_commit(run):
    """The same with the chunks' and the row's checksums of version 0 too: a consistent row, but of the version
    before the one whose write returned."""
    new, old = run.row("a", 1), run.old["a"]
    for c in old.chunks:
        run.set_chunk(new, c.seq, offset=c.offset, nbytes=c.nbytes, checksum=c.checksum)
    run.sql("UPDATE writes SET stored_nbytes = ?, checksum = ? WHERE id = ?", old.stored_nbytes, old.checksum, new.id)
    out = run.check()
    assert out["bad"] == []
    assert [(x["dataset"], x["step"], x["version"]) for x in out["lost"]] == [("a", 1, 1)]


def test_boxes_that_do_not_tile_the_array_are_a_bad_row(run):
    r = run.row("a", 0)
    run.set_chunk(r, 1, box=json.dumps(r.chunks[0].box))
    b = _only(run.bad(), ("a", 0), {"bad_boxes"})
    assert "in no box" in b["detail"]


def test_a_chunk_past_the_end_of_its_file_is_a_bad_row(run):
    r = run.row("b", 1)
    size = r.chunks[0].file.stat().st_size
    run.set_chunk(r, 2, offset=size - 3)
    _only(run.bad(), ("b", 1), {"short_file"})


def test_chunks_sharing_bytes_are_overlapping_rows(run):
    a, b = run.row("a", 0), run.row("b", 0)
    run.set_chunk(b, 0, offset=a.chunks[2].offset, nbytes=b.chunks[0].nbytes)
    out = run.check()
    assert set(out["overlap"]) == {a.id, b.id}
    assert {(x["dataset"], x["step"]) for x in out["bad"]} == {("b", 0)}


def test_missing_chunks_are_a_bad_row(run):
    r = run.row("b", 0)
    run.sql("DELETE FROM extents WHERE write_id = ? AND seq = ?", r.id, 5)
    _only(run.bad(), ("b", 0), {"wrong_extents"})
