"""Data-file trailers: a level-2/3 file copied alone says what it holds (``sdm.storage.trailer``).

The footer is parsed here with :mod:`struct` and :mod:`zlib` as ``docs/format.md`` lays it
out, and every step is read back with ``numpy.fromfile`` from the trailer's offsets alone,
compared with arrays built independently; then the file is copied away from its run
and read through ``sdm describe`` and ``read_array``; damage is reported; an appending
session writes a new trailer, the older one becomes reclaimable bytes that ``sdm gc``
frees; a truncation's cut file gets a fresh trailer at close.
"""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import sdm
from sdm._cli.main import app
from sdm.errors import DatasetNotFoundError, IntegrityError, StepNotFoundError
from sdm.maintenance import gc_run, verify_run
from sdm.storage.trailer import read_array, read_trailer

SHAPE = (6, 5)


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def field(name: str, step: int) -> np.ndarray:
    """The reference array of one step (built from the step alone)."""
    base = {"T": 1000.0, "P": -7.0}[name]
    return base + step + np.arange(np.prod(SHAPE), dtype=np.float64).reshape(SHAPE) / 8


def write_run(root: Path, url: str, steps, *, mode: str = "w", run: int | None = None, level: int = 3) -> int:
    with sdm.open("tr", mode, root=str(root), catalog=url, run=run) as s:
        g = s.make_group("fields", ["T", "P"], dtype="<f8", shape=SHAPE, level=level)
        for step in steps:
            g.write_step(step, {"T": field("T", step), "P": field("P", step)})
        return s.run_id


def data_files(root: Path, name: str = "*.sdm") -> list[Path]:
    return sorted(p for p in root.rglob(name) if p.is_file())


def footer(path: Path) -> tuple[int, int, bytes]:
    """The trailer's JSON offset, length and JSON bytes, parsed as docs/format.md lays them out."""
    raw = path.read_bytes()
    magic, start, length, crc, version = struct.unpack("<8sQQII", raw[-32:])
    assert (magic, version) == (b"SDMTRAIL", 1)
    assert start + length + 32 == len(raw)
    body = raw[start:start + length]
    assert zlib.crc32(body) == crc
    return start, length, body


def test_a_closed_file_describes_itself_byte_by_byte(tmp_path):
    root = tmp_path / "root"
    run_id = write_run(root, f"sqlite:///{tmp_path}/c.db", [0, 5, 10])
    (path,) = data_files(root)
    start, _, body = footer(path)
    index = json.loads(body)
    assert index["application"] == "tr" and index["run"] == run_id and index["group"] == "fields"
    assert index["level"] == 3 and index["file"] == str(path.relative_to(root))
    assert index["datasets"] == {n: {"dtype": "<f8", "shape": list(SHAPE), "order": "C", "distribution": None}
                                 for n in ("T", "P")}
    assert [(w["dataset"], w["step"]) for w in index["writes"]] == [(n, s) for s in (0, 5, 10) for n in ("T", "P")]
    assert start == sum(w["nbytes"] for w in index["writes"]) == 6 * 8 * np.prod(SHAPE)
    for w in index["writes"]:  # numpy alone, from the trailer's offsets
        got = np.fromfile(path, dtype="<f8", count=w["nbytes"] // 8, offset=w["offset"]).reshape(SHAPE)
        np.testing.assert_array_equal(got, field(w["dataset"], w["step"]))
    assert read_trailer(path) == {**index, "described_bytes": start}


def test_a_file_copied_alone_is_read_and_verified_without_the_catalog(tmp_path):
    root = tmp_path / "root"
    write_run(root, f"sqlite:///{tmp_path}/c.db", [1, 2])
    (path,) = data_files(root)
    alone = tmp_path / "elsewhere" / "copy.sdm"
    alone.parent.mkdir()
    shutil.copy(path, alone)
    shutil.rmtree(root)
    (tmp_path / "c.db").unlink()
    for name in ("T", "P"):
        for step in (1, 2):
            np.testing.assert_array_equal(read_array(alone, name, step), field(name, step))
    got = cli("describe", str(alone), "--verify", "--json")
    assert got.exit_code == 0, got.output
    assert [(w["dataset"], w["step"]) for w in json.loads(got.output)["writes"]] == [("T", 1), ("P", 1), ("T", 2), ("P", 2)]
    text = cli("describe", str(alone))
    assert text.exit_code == 0
    assert f"numpy.fromfile({str(alone)!r}, dtype='<f8', count=30, offset=0).reshape((6, 5), order='C') is step 1 " \
           "of 'T'" in " ".join(text.output.split())
    with pytest.raises(DatasetNotFoundError, match=r"holds no dataset 'Q'; it holds \['P', 'T'\]$"):
        read_array(alone, "Q", 1)
    with pytest.raises(StepNotFoundError, match=r"holds no step 3 of dataset 'T'; its steps are \[1, 2\]$"):
        read_array(alone, "T", 3)


def test_damage_is_named(tmp_path):
    root = tmp_path / "root"
    write_run(root, f"sqlite:///{tmp_path}/c.db", [0])
    (path,) = data_files(root)
    start, _, _ = footer(path)
    raw = bytearray(path.read_bytes())
    raw[8] ^= 0x01  # one data byte of step 0 of T
    path.write_bytes(bytes(raw))
    assert read_trailer(path)["writes"][0]["offset"] == 0  # the trailer itself is intact
    with pytest.raises(IntegrityError) as err:
        read_array(path, "T", 0)
    assert str(err.value) == f"step 0 of 'T' in {path} does not match its checksum mix64-v2:" \
                             f"{read_trailer(path)['writes'][0]['checksum']}"
    got = cli("describe", str(path), "--verify")
    assert got.exit_code == 1 and "does not match its checksum" in got.output
    np.testing.assert_array_equal(read_array(path, "P", 0), field("P", 0))  # the other dataset still reads
    raw[8] ^= 0x01
    raw[start + 3] ^= 0x20  # one byte of the trailer's JSON
    path.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError) as err:
        read_trailer(path)
    assert str(err.value) == (f"{path}: the trailer at byte {start} is damaged (its CRC-32 does not match); the run "
                              "directory's meta-file .sdm-meta.jsonl describes every committed write")


def test_files_without_a_trailer_say_where_the_description_is(tmp_path):
    root = tmp_path / "root"
    write_run(root, f"sqlite:///{tmp_path}/c.db", [0], level=1)
    level1 = data_files(root)[0]
    with pytest.raises(IntegrityError) as err:
        read_trailer(level1)
    assert str(err.value) == (
        f"{level1} does not describe itself: it does not end with an SDM trailer (a level-1 file, a session that did "
        "not close, or not an SDM data file); the run directory's meta-file .sdm-meta.jsonl describes every committed write")
    got = cli("describe", str(tmp_path / "nope.sdm"))
    assert got.exit_code == 1 and "cannot read" in got.output and "No such file or directory" in got.output


def test_an_appending_session_writes_a_new_trailer_and_gc_frees_the_old(tmp_path):
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    run_id = write_run(root, url, [0, 1])
    (path,) = data_files(root)
    first_start, first_len, _ = footer(path)
    write_run(root, url, [2], mode="a", run=run_id)
    start, _, body = footer(path)
    assert start == first_start + first_len + 32 + 2 * 8 * 30  # the old trailer kept, step 2 after it
    assert [(w["dataset"], w["step"]) for w in json.loads(body)["writes"]] == \
        [(n, s) for s in (0, 1, 2) for n in ("T", "P")]
    cat = sdm.Catalog(url, create=False)
    try:
        report = verify_run(cat, run_id)
        assert report.ok and report.rows == 6
        assert [(u.offset, u.nbytes) for u in report.unreferenced] == [(first_start, first_len + 32)]
        gc_run(cat, run_id)
        assert verify_run(cat, run_id).unreferenced == []
    finally:
        cat.close()
    for name in ("T", "P"):
        for step in (0, 1, 2):
            np.testing.assert_array_equal(read_array(path, name, step), field(name, step))


def test_a_truncated_file_gets_a_new_trailer_at_close(tmp_path):
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    run_id = write_run(root, url, [0, 1, 2, 3])
    with sdm.open("tr", "a", root=str(root), catalog=url, run=run_id) as s:
        s.truncate(after_step=1)
    (path,) = data_files(root)
    index = read_trailer(path)
    assert [(w["dataset"], w["step"]) for w in index["writes"]] == [(n, s) for s in (0, 1) for n in ("T", "P")]
    assert index["described_bytes"] == 4 * 8 * 30
    cat = sdm.Catalog(url, create=False)
    try:
        assert verify_run(cat, run_id).unreferenced == []
    finally:
        cat.close()


def test_a_ranked_section_is_read_from_its_file_alone(tmp_path):
    root = tmp_path / "root"
    rows = np.arange(21, dtype="<i4").reshape(7, 3) * 11
    with sdm.open("tr", root=str(root), catalog=f"sqlite:///{tmp_path}/c.db") as s:
        g = s.make_group("particles", ["pos"], dtype="<i4", shape=(3,), level=3, view=sdm.Ranked())
        g.write("pos", 4, rows)
        g.write("pos", 5, rows[:0])
    (path,) = data_files(root)
    assert json.loads(footer(path)[2])["datasets"]["pos"]["distribution"] == {"kind": "ranked"}
    np.testing.assert_array_equal(read_array(path, "pos", 4), rows)
    got = read_array(path, "pos", 5)
    assert got.shape == (0, 3) and got.dtype == np.dtype("<i4")
