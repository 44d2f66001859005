"""Hostile files are refused cleanly: crafted trailers, meta-files, run markers, history
descriptions, cache indexes and imported files (``sdm.file_formats``).

Each case starts from real files written by SDM (``format_seeds``), changes them as an
attacker would (valid CRCs recomputed with :mod:`zlib` as ``docs/format.md`` lays them
out), and checks the exact answer: :class:`sdm.errors.IntegrityError` whose message names
the file (and line) and the member, through the Python functions and the ``sdm``
command (``describe`` with and without ``--verify`` and ``--json``, ``rebuild``,
``import``), never an internal error, a ``MemoryError`` or a hang; and that nothing was
lost: the crafted file unchanged, the catalog unchanged, no run made.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tracemalloc
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from typer.testing import CliRunner

from format_seeds import ROWS, Seed, field, series, write_seed_run
from sdm._cli.main import app
from sdm.catalog import Catalog
from sdm.catalog.metafile import BACKUP, META
from sdm.catalog.rebuild import rebuild
from sdm.errors import IntegrityError
from sdm.storage.trailer import read_array, read_trailer

pytestmark = pytest.mark.timeout(120)

MAX_BYTES = "9007199254740992"
DEEP = 100_000  # deep enough to exhaust any recursive parser


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Seed:
    return write_seed_run(tmp_path_factory.mktemp("seed"))


@pytest.fixture(scope="module")
def reference_catalog(seed: Seed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A catalog holding the seed run, rebuilt from its untouched meta-file (copied by each test)."""
    path = tmp_path_factory.mktemp("catalog") / "reference.db"
    assert rebuild(seed.root, f"sqlite:///{path}").added == [seed.run_id]
    return path


# ----------------------------------------------------------------------------- trailers, by hand
def footer(raw: bytes) -> tuple[int, int]:
    """The trailer's JSON offset and length, parsed as docs/format.md lays the footer out."""
    magic, start, length, crc, version = struct.unpack("<8sQQII", raw[-32:])
    assert (magic, version, start + length + 32) == (b"SDMTRAIL", 1, len(raw))
    assert zlib.crc32(raw[start:start + length]) == crc
    return start, length


def index_of(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    start, length = footer(raw)
    return json.loads(raw[start:start + length])


def with_trailer(path: Path, body: bytes) -> int:
    """Replace the trailer of *path* by *body* (any bytes), with a valid footer and CRC; its start."""
    raw = path.read_bytes()
    start, _ = footer(raw)
    path.write_bytes(raw[:start] + body + struct.pack("<8sQQII", b"SDMTRAIL", start, len(body), zlib.crc32(body), 1))
    return start


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def changed(fn: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], bytes]:
    def body(index: dict[str, Any]) -> bytes:
        fn(index)
        return json.dumps(index).encode()
    return body


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set the member at dotted *path* (list indexes as numbers) of an index."""
    def apply(index: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = index
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
    return apply


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda index: index.pop(key)


TRAILER_CASES = {
    "non-JSON": (lambda index: b'{"format": 1, "writes": [', "the trailer is not JSON ("),
    "non-UTF-8": (lambda index: json.dumps(index).encode().replace(b'"seed"', b'"se\xffed"', 1),
                  "the trailer is not UTF-8 text (byte "),
    "list-shaped": (lambda index: b"[1, 2, 3]", "the trailer is a JSON list, not an object"),
    "deeply nested": (lambda index: nested(DEEP).encode(), "the trailer is nested deeper than 32 levels"),
    "deeply nested member": (lambda index: json.dumps(index).replace('"distribution": null', '"distribution": '
                                                                      + nested(DEEP), 1).encode(),
                             "the trailer is nested deeper than 32 levels"),
    "missing writes": (changed(_drop("writes")), "member writes is missing (a list is required)"),
    "missing application": (changed(_drop("application")), "member application is missing"),
    "writes null": (changed(_set("writes", None)), "writes must be a list, not null None"),
    "string nbytes": (changed(_set("writes.0.nbytes", "96")),
                      f"writes[0].nbytes must be an integer in 0..{MAX_BYTES}, not text '96'"),
    "negative offset": (changed(_set("writes.0.offset", -8)),
                        f"writes[0].offset must be an integer in 0..{MAX_BYTES}, not integer -8"),
    "10**15 nbytes": (changed(_set("writes.0.nbytes", 10**15)),
                      "writes[0] (bytes 0..1000000000000000) does not lie before the trailer at byte "),
    "object dtype": (changed(_set("datasets.T.dtype", "O")),
                     "datasets.T.dtype must be a numpy dtype SDM stores (numeric, bool, datetime, fixed-width string "
                     "or a packed structure of those), not text 'O'"),
    "float shape": (changed(_set("datasets.T.shape", [1e9, 1e9])),
                    "datasets.T.shape[0] must be an integer in 0..9223372036854775807, not number 1000000000.0"),
    "huge shape": (changed(_set("datasets.T.shape", [10**9, 10**9])),
                   "datasets.T.shape [1000000000, 1000000000] of <f8 holds 8000000000000000000 bytes, more than the "
                   "bytes before the trailer"),
    "unknown dataset": (changed(_set("writes.0.dataset", "Q")),
                        "writes[0].dataset 'Q' is none of the trailer's datasets ('T', 'P')"),
    "unknown checksum": (changed(_set("writes.0.algo", "md5")),
                         "writes[0].algo must be one of 'mix64-v2', 'sum64-v1', not text 'md5'"),
    "wrong size": (changed(_set("writes.0.nbytes", 88)),
                   "writes[0].nbytes must be 96 (the bytes of dataset 'T'), not integer 88"),
}


@pytest.mark.parametrize("case", list(TRAILER_CASES))
def test_a_crafted_trailer_is_refused_with_the_file_and_the_member(seed: Seed, tmp_path: Path, case: str) -> None:
    make, fragment = TRAILER_CASES[case]
    path = tmp_path / "copy.sdm"
    shutil.copy(seed.fields, path)
    start = with_trailer(path, make(index_of(path)))
    before = path.read_bytes()
    head = f"{path} (trailer at byte {start}): "
    with pytest.raises(IntegrityError) as err:
        read_trailer(path)
    assert str(err.value).startswith(head) and fragment in str(err.value), str(err.value)
    assert "the run directory's meta-file .sdm-meta.jsonl describes every committed write" in str(err.value)
    with pytest.raises(IntegrityError) as err:
        read_array(path, "T", 0)
    assert fragment in str(err.value)
    for extra in ([], ["--json"], ["--verify"], ["--verify", "--json"]):
        got = cli("describe", str(path), *extra)
        assert got.exit_code == 1, got.output
        assert got.output.startswith(f"error: {head}") and fragment in got.output, got.output
        assert got.output.count("\n") == 1 and "internal error" not in got.output
    assert path.read_bytes() == before  # nothing written
    np.testing.assert_array_equal(read_array(seed.fields, "T", 0), field("T", 0))  # the original still reads


def test_a_claimed_length_of_10_to_the_15_allocates_nothing(seed: Seed, tmp_path: Path) -> None:
    path = tmp_path / "copy.sdm"
    shutil.copy(seed.fields, path)
    index = index_of(path)
    for w in index["writes"]:
        w["nbytes"] = 10**15
    start = with_trailer(path, json.dumps(index).encode())
    tracemalloc.start()
    try:
        with pytest.raises(IntegrityError) as err:
            read_array(path, "T", 0, verify=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"writes[0] (bytes 0..1000000000000000) does not lie before the trailer at byte {start}" in str(err.value)
    assert peak < 256 << 10, f"{peak} bytes allocated for a {path.stat().st_size}-byte file"
    got = cli("describe", str(path), "--verify")
    assert got.exit_code == 1 and "does not lie before the trailer" in got.output and "MemoryError" not in got.output


def test_a_ranked_header_that_contradicts_the_trailer(seed: Seed, tmp_path: Path) -> None:
    path = tmp_path / "parts.sdm"
    shutil.copy(seed.parts, path)
    index = index_of(path)
    (w,) = index["writes"]
    raw = path.read_bytes()[w["offset"]:w["offset"] + w["nbytes"]]
    head, nranks, total, _, row_bytes = struct.unpack_from("<5Q", raw, 8)  # as docs/format.md lays it out
    assert (total, row_bytes) == (3, 16)
    np.testing.assert_array_equal(read_array(path, "pos", 0), ROWS)
    index["datasets"]["pos"]["shape"] = [3]  # rows of 24 bytes: the header says 16
    with_trailer(path, json.dumps(index).encode())
    message = (f"step 0 of 'pos' in {path}: its ranked-section header says 3 rows of 16 bytes after {head} header "
               f"bytes, but the trailer says {w['nbytes']} bytes in all and rows of 24 bytes (shape [3] of <i8)")
    with pytest.raises(IntegrityError) as err:
        read_array(path, "pos", 0)
    assert str(err.value) == message
    got = cli("describe", str(path), "--verify")
    assert got.exit_code == 1 and got.output == f"error: {message}\n"


@pytest.mark.timeout(30)
def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.sdm"
    os.mkfifo(fifo)
    message = f"{fifo}: it is not a regular file but a FIFO; give a level-2 or level-3 data file"
    with pytest.raises(IntegrityError) as err:
        read_trailer(fifo)
    assert str(err.value) == message
    got = cli("describe", str(fifo))
    assert (got.exit_code, got.output) == (1, f"error: {message}\n")


def test_a_superfile_describes_its_members(tmp_path: Path) -> None:
    """The index ``sdm migrate --pack-below`` appends to a superfile (the real encoder), described and verified."""
    from sdm.storage.trailer import encode

    members = [b"first file " * 10, b"second" * 33]
    body, index, offset = b"", [], 0
    for k, data in enumerate(members):
        index.append({"path": f"app/run-1/f{k}.sdm", "offset": offset, "size": len(data),
                      "checksum": f"sha256:{hashlib.sha256(data).hexdigest()}"})
        body += data
        offset += len(data)
    path = tmp_path / "superfile-1.sdmpack"
    path.write_bytes(body + encode({"format": 1, "superfile": True, "run": 7, "members": index}, offset))
    got = cli("describe", str(path), "--verify")
    assert got.exit_code == 0, got.output
    assert f"{path}: superfile of run 7, 2 files packed, every digest verified" in " ".join(got.output.split())
    got = cli("describe", str(path), "--json")
    assert json.loads(got.output)["members"] == index
    raw = bytearray(path.read_bytes())
    raw[3] ^= 1  # a byte of the first member
    path.write_bytes(bytes(raw))
    got = cli("describe", str(path), "--verify")
    assert got.exit_code == 1 and got.output.startswith(f"error: member app/run-1/f0.sdm of superfile {path} "
                                                        "(bytes 0..110) does not match its digest sha256:")
    index[1]["size"] = 10**15  # a member beyond the object
    path.write_bytes(body + encode({"format": 1, "superfile": True, "run": 7, "members": index}, offset))
    with pytest.raises(IntegrityError, match=r"members\[1\] \(bytes 110\.\.1000000000000110\) does not lie before "
                                             rf"the trailer at byte {offset}"):
        read_trailer(path)


# ----------------------------------------------------------------------------- meta-files
def meta_line(record_text: str) -> bytes:
    """A meta-file line of the JSON object *record_text*, its CRC computed as docs/format.md says."""
    return (record_text[:-1] + f',"crc":"{zlib.crc32(record_text.encode()):08x}"}}\n').encode()


def hostile_copy(seed: Seed, tmp_path: Path, line_of_type: str, change: Callable[[dict[str, Any]], str | None]
                 ) -> tuple[Path, Path, int]:
    """A copy of the seed's run directory under a new data root, the first record of type *line_of_type*
    changed in both the meta-file and its backup; the data root, the meta-file and the line number."""
    data = tmp_path / "data"
    run_dir = data / "seed" / seed.run_dir.name
    shutil.copytree(seed.run_dir, run_dir)
    lines = (run_dir / META).read_bytes().split(b"\n")
    number = next(i for i, raw in enumerate(lines, start=1) if json.loads(raw)["t"] == line_of_type)
    text = lines[number - 1].decode()
    record = json.loads(text[:text.rindex(',"crc":')] + "}")
    out = change(record)
    lines[number - 1] = meta_line(out if out is not None else json.dumps(record, separators=(",", ":")))[:-1]
    for p in (run_dir / META, run_dir / BACKUP):
        p.write_bytes(b"\n".join(lines))
    return data, run_dir / META, number


def edit(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return _set(path, value)


def deep_member(record: dict[str, Any]) -> str:
    record["attributes"] = {"deep": "@DEEP@"}
    return json.dumps(record, separators=(",", ":")).replace('"@DEEP@"', nested(DEEP))


def drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda record: record.pop(key) and None


META_CASES = {
    "string nbytes": ("writes", edit("writes.0.nbytes", "96"),
                      f"writes[0].nbytes must be an integer in 0..{MAX_BYTES}, not text '96'"),
    "writes null": ("writes", edit("writes", None), "writes must be a list, not null None"),
    "negative offset": ("writes", edit("writes.0.offset", -8),
                        f"writes[0].offset must be an integer in 0..{MAX_BYTES}, not integer -8"),
    "10**15 nbytes": ("writes", edit("writes.0.nbytes", 10**15),
                      "writes[0].nbytes must be 96 (the bytes of dataset 'T' of group 'fields'), not integer "
                      "1000000000000000"),
    "undefined group": ("writes", edit("writes.0.group", "ghost"),
                        "writes[0] names group 'ghost', which no earlier group record defines"),
    "object dtype": ("group", edit("datasets.0.dtype", "O"), "datasets[0].dtype must be a numpy dtype SDM stores"),
    "float shape": ("group", edit("datasets.0.shape", [1e9, 1e9]),
                    "datasets[0].shape[0] must be an integer in 0..9223372036854775807, not number 1000000000.0"),
    "huge shape": ("group", edit("datasets.0.shape", [2**40, 2**40]),
                   "datasets[0].shape [1099511627776, 1099511627776] of <f8 holds 9671406556917033397649408 bytes, "
                   f"more than SDM stores in one array ({MAX_BYTES})"),
    "name leaving the run": ("group", edit("datasets.0.name", "../T"),
                             "datasets[0].name must be a name SDM accepts"),
    "missing application": ("run", drop("application"), "member application is missing"),
    "not a time": ("run", edit("created", "yesterday"), "created must be an ISO 8601 time, not text 'yesterday'"),
    "list attribute": ("run", edit("attributes.case", [1, 2]), "attributes.case is not an attribute SDM stores"),
    "info not base64": ("info", edit("data", "@@@"), "data must be base64 text, not text '@@@'"),
    "info too short": ("info", edit("data", "AAAA"), "data holds 3 bytes but shape [2, 3] of >f8 needs 48"),
    "import string count": ("import", edit("count", "4"), f"count must be an integer in 0..{MAX_BYTES}, not text '4'"),
    "import negative offset": ("import", edit("offset", -1),
                               f"offset must be an integer in 0..{MAX_BYTES}, not integer -1"),
    "import 10**15 nbytes": ("import", edit("nbytes", 10**15),
                             "nbytes must be 32 (count x itemsize), not integer 1000000000000000"),
    "truncate of no group": ("truncate", edit("groups", ["ghost"]),
                             "groups names group 'ghost', which no earlier group record defines"),
}


@pytest.mark.parametrize("case", list(META_CASES))
def test_a_crafted_meta_file_is_refused_by_rebuild_with_its_line_and_member(
        seed: Seed, reference_catalog: Path, tmp_path: Path, case: str) -> None:
    kind, change, fragment = META_CASES[case]
    data, meta, number = hostile_copy(seed, tmp_path, kind, change)
    catalog = tmp_path / "catalog.db"
    shutil.copy(reference_catalog, catalog)
    url = f"sqlite:///{catalog}"
    counts = Catalog(url).counts()
    before = {p: p.read_bytes() for p in meta.parent.iterdir()}
    message_head = f"{meta} line {number}: {fragment}"
    with pytest.raises(IntegrityError) as err:
        rebuild(data, url)
    assert str(err.value).startswith(message_head), str(err.value)
    assert str(err.value).endswith("its lines carry valid CRCs, so they were written this way, not damaged: the "
                                   "meta-file was edited or not written by SDM; restore the run directory from a copy")
    got = cli("rebuild", str(data), "--catalog", url)
    assert got.exit_code == 1 and got.output.startswith(f"error: {message_head}"), got.output
    assert "internal error" not in got.output and got.output.count("\n") == 1
    assert Catalog(url).counts() == counts  # the catalog unchanged
    assert {p: p.read_bytes() for p in meta.parent.iterdir()} == before  # the run directory unchanged


def test_a_deeply_nested_meta_file_line_is_damage_named_with_its_line(seed: Seed, tmp_path: Path) -> None:
    data, meta, number = hostile_copy(seed, tmp_path, "run", deep_member)
    url = f"sqlite:///{tmp_path}/catalog.db"
    with pytest.raises(IntegrityError) as err:
        rebuild(data, url)
    why = f"damaged at line {number} (the line is nested deeper than 32 levels (SDM writes at most 5); 0 intact"
    assert f"{meta} is {why}" in str(err.value) and f"{meta.with_name(BACKUP)} is {why}" in str(err.value)
    got = cli("rebuild", str(data), "--catalog", url)
    assert got.exit_code == 1 and why in got.output and "internal error" not in got.output
    assert Catalog(url).counts()["runs"] == 0


# ----------------------------------------------------------------------------- run markers
def copied_run(seed: Seed, tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "data"
    run_dir = data / "seed" / seed.run_dir.name
    shutil.copytree(seed.run_dir, run_dir)
    return data, run_dir


@pytest.mark.parametrize("content, fragment", [
    (nested(10_000), "the marker is nested deeper than 32 levels"),
    ("[]", "the marker is a JSON list, not an object"),
    ('{"catalog": "c", "run": "1"}', "run must be an integer in 1..9223372036854775807, not text '1'"),
    ('{"catalog": "c", "run": 1, "metafile": "no"}', "metafile must be true or false, not text 'no'"),
])
def test_a_crafted_marker_is_refused_by_rebuild(seed: Seed, tmp_path: Path, content: str, fragment: str) -> None:
    data, run_dir = copied_run(seed, tmp_path)
    marker = run_dir / ".sdm-run"
    marker.write_text(content)
    url = f"sqlite:///{tmp_path}/catalog.db"
    with pytest.raises(IntegrityError) as err:
        rebuild(data, url)
    assert str(err.value).startswith(f"{marker}: {fragment}"), str(err.value)
    got = cli("rebuild", str(data), "--catalog", url)
    assert got.exit_code == 1 and got.output.startswith(f"error: {marker}: {fragment}")
    assert Catalog(url).counts()["runs"] == 0
    assert marker.read_text() == content


@pytest.mark.timeout(30)
def test_a_marker_that_is_a_fifo_does_not_block_rebuild(seed: Seed, tmp_path: Path) -> None:
    data, run_dir = copied_run(seed, tmp_path)
    marker = run_dir / ".sdm-run"
    marker.unlink()
    os.mkfifo(marker)
    with pytest.raises(IntegrityError) as err:
        rebuild(data, f"sqlite:///{tmp_path}/catalog.db")
    assert str(err.value).startswith(f"{marker}: it is not a regular file but a FIFO")


@pytest.mark.parametrize("name", [".sdm-run", ".sdm-meta.jsonl"])
def test_a_marker_or_meta_file_that_is_a_link_is_never_followed(seed: Seed, tmp_path: Path, name: str) -> None:
    """A link in place of the marker or the meta-file, to a large file outside the run: refused, not read."""
    data, run_dir = copied_run(seed, tmp_path)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x" * (1 << 20))
    target = run_dir / name
    target.unlink()
    target.symlink_to(outside)
    url = f"sqlite:///{tmp_path}/catalog.db"
    with pytest.raises(IntegrityError) as err:
        rebuild(data, url)
    assert str(err.value).startswith(f"{target}: it is a symbolic link"), str(err.value)
    assert Catalog(url).counts()["runs"] == 0
    assert outside.read_bytes() == b"x" * (1 << 20)


def test_a_session_refuses_a_run_whose_marker_is_not_sdms(seed: Seed, reference_catalog: Path, tmp_path: Path) -> None:
    """Appending to a run checks its marker first: a crafted one is an IntegrityError, nothing is written."""
    import sdm

    data, run_dir = copied_run(seed, tmp_path)
    catalog = tmp_path / "catalog.db"
    assert rebuild(data, f"sqlite:///{catalog}").added == [seed.run_id]
    marker = run_dir / ".sdm-run"
    marker.write_text('{"catalog": 5, "run": 1}')
    before = {p: p.read_bytes() for p in run_dir.iterdir()}
    with pytest.raises(IntegrityError) as err:
        sdm.open("seed", "a", root=str(data), catalog=f"sqlite:///{catalog}", run=seed.run_id)
    assert str(err.value).startswith(f"{marker}: catalog must be text of at most 255 characters, not integer 5")
    assert {p: p.read_bytes() for p in run_dir.iterdir()} == before


# ----------------------------------------------------------------------------- index-history descriptions
HISTORY = {"v": 1, "t": "history", "application": "seed", "problem": "mesh", "content_hash": "abc", "nprocs": 2,
           "path": "seed/histories/mesh.abc.p2.idx", "nbytes": 64, "run_id": None, "sources": None,
           "parts": [["nodes", 0, 0, 4, "<i8"], ["nodes", 1, 32, 4, "<i8"]], "created": "2026-01-02T03:04:05+00:00"}


@pytest.mark.parametrize("change, fragment", [
    (lambda r: r.pop("parts"), "member parts is missing (a list is required)"),
    (lambda r: r["parts"][1].__setitem__(3, 10**15), "parts[1] (bytes 32..8000000000000032) does not lie within the "
                                                     "history's 64 bytes"),
    (lambda r: r.__setitem__("nbytes", 10**15), "nbytes 1000000000000000 is more than its history file holds (64)"),
    (lambda r: r["parts"][1].__setitem__(1, 5), "parts[1][1] must be a rank below nprocs 2, not integer 5"),
    (lambda r: r["parts"].pop(), "parts do not give every rank 0..1 the same sections (rank 0: ['nodes'])"),
    (lambda r: r["parts"][0].__setitem__(4, "O"), "parts[0][4] must be a numpy dtype SDM stores"),
])
def test_a_crafted_history_description_is_left_out_with_a_note(seed: Seed, tmp_path: Path, change: Any,
                                                                fragment: str) -> None:
    data, _ = copied_run(seed, tmp_path)
    histories = data / "seed" / "histories"
    histories.mkdir()
    (histories / "mesh.abc.p2.idx").write_bytes(np.arange(8, dtype="<i8").tobytes())
    side = histories / "mesh.abc.p2.idx.json"
    side.write_bytes(meta_line(json.dumps(HISTORY, separators=(",", ":"))))
    assert rebuild(data, f"sqlite:///{tmp_path}/good.db").histories == 1  # as written: registered
    record = json.loads(json.dumps(HISTORY))
    change(record)
    side.write_bytes(meta_line(json.dumps(record, separators=(",", ":"))))
    report = rebuild(data, f"sqlite:///{tmp_path}/catalog.db")
    assert (report.added, report.histories) == ([seed.run_id], 0)
    assert len(report.notes) == 1 and report.notes[0].startswith(f"{side}: {fragment}"), report.notes
    assert report.notes[0].endswith("that index history is left out (a run recomputes its partition)")


# ----------------------------------------------------------------------------- the remote subfile cache
@pytest.mark.parametrize("ranges", [[[0, 10**15]], "abc", [[5, 2]], [[0, 1, 2]]])
def test_a_crafted_cache_index_is_no_index(tmp_path: Path, ranges: Any) -> None:
    from sdm.io.remote import _index, _update_index

    index = tmp_path / "cache.json"
    (tmp_path / "cache.bytes").write_bytes(bytes(100))
    _update_index(index, "sha256:x", "s3://b/k", [(0, 100)])  # what SDM writes
    assert _index(index, "sha256:x") == [(0, 100)]
    index.write_text(json.dumps({"location": "s3://b/k", "copy": "sha256:x", "ranges": ranges}))
    assert _index(index, "sha256:x") == []  # nothing held: the bytes are fetched again


# ----------------------------------------------------------------------------- sdm import of a described file
def _h5(path: Path, steps: Any, missing: Any = None) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        scale = f.create_dataset("step", data=np.asarray(steps))
        scale.make_scale("step")
        d = f.create_dataset("T", data=np.zeros((len(steps), 3)))
        d.dims[0].attach_scale(scale)
        if missing is not None:
            d.attrs["sdm_missing_steps"] = missing


@pytest.mark.parametrize("steps, missing, fragment", [
    ([0, 1], "abc", "array 'T': attribute 'sdm_missing_steps' must be a list of integers >= 0, not 'abc'"),
    ([0, 1], np.array([-1]), "array 'T': attribute 'sdm_missing_steps' must be a list of integers >= 0"),
    ([0.0, float("nan")], None, "array '/T': its 'step' coordinate must hold 2 distinct integers >= 0 (one per index "
                                "of the first dimension), not [0.0, nan]"),
    ([0, -1], None, "array '/T': its 'step' coordinate must hold 2 distinct integers >= 0"),
    ([3, 3], None, "array '/T': its 'step' coordinate must hold 2 distinct integers >= 0"),
])
def test_an_exported_file_that_lies_about_its_steps_is_refused_before_a_run_is_made(
        tmp_path: Path, steps: Any, missing: Any, fragment: str) -> None:
    from sdm.exporting import import_file

    path = tmp_path / "in.h5"
    _h5(path, steps, missing)
    catalog = tmp_path / "catalog.db"
    with pytest.raises(IntegrityError) as err:
        import_file(path, format="hdf5", application="imp", catalog=f"sqlite:///{catalog}", root=tmp_path / "data")
    assert str(err.value).startswith(f"{path}: {fragment}"), str(err.value)
    assert str(err.value).endswith("the file was not written as SDM exports")
    got = cli("import", str(path), "--format", "hdf5", "--app", "imp", "--root", str(tmp_path / "data"),
              "--catalog", str(catalog))
    assert got.exit_code == 1 and got.output.startswith(f"error: {path}: {fragment}"), got.output
    assert not catalog.exists() and not (tmp_path / "data").exists()  # no run made


def _netcdf(path: Path, steps: Any) -> None:
    import netCDF4

    with netCDF4.Dataset(path, "w") as f:
        f.createDimension("step", len(steps))
        f.createDimension("x", 3)
        f.createVariable("step", "f8", ("step",))[:] = np.asarray(steps, dtype="f8")
        f.createVariable("T", "f8", ("step", "x"))[:] = np.zeros((len(steps), 3))


def _zarr(path: Path, steps: Any) -> None:
    import zarr

    root = zarr.open_group(store=str(path), mode="w", zarr_format=3)
    root.create_array("step", shape=(len(steps),), dtype="f8", dimension_names=["step"])[:] = np.asarray(steps)
    root.create_array("T", shape=(len(steps), 3), dtype="f8", dimension_names=["step", "x"])[:] = 0.0


@pytest.mark.parametrize("fmt, make, name", [("netcdf", _netcdf, "in.nc"), ("zarr", _zarr, "in.zarr")])
@pytest.mark.parametrize("steps", [[0.0, float("nan")], [2, 2], [-3, 1]])
def test_netcdf_and_zarr_step_coordinates_are_checked_too(tmp_path: Path, fmt: str, make: Any, name: str,
                                                          steps: list[float]) -> None:
    from sdm.exporting import import_file

    path = tmp_path / name
    make(path, steps)
    catalog = tmp_path / "catalog.db"
    with pytest.raises(IntegrityError) as err:
        import_file(path, format=fmt, application="imp", catalog=f"sqlite:///{catalog}", root=tmp_path / "data")
    assert str(err.value).startswith(str(path)), str(err.value)
    assert "'step' coordinate must hold 2 distinct integers >= 0 (one per index of the first dimension)" \
        in str(err.value)
    assert not catalog.exists() and not (tmp_path / "data").exists()


def test_the_limits_are_sdms_own() -> None:
    """The reader's limits are those SDM writes with (kept apart so that reading a marker imports no numpy)."""
    from sdm import _validate, file_formats
    from sdm.catalog.metafile import TYPES

    assert (file_formats.MAX_BYTES, file_formats.INT_MAX) == (_validate.MAX_BYTES, _validate.MAX_INT)
    assert set(TYPES) == set(file_formats.META_RECORDS)


def test_the_seed_itself_reads_back(seed: Seed) -> None:
    """The unchanged seed is accepted everywhere (the checks refuse what SDM does not write, nothing more)."""
    for step in range(3):
        for name in ("T", "P"):
            np.testing.assert_array_equal(read_array(seed.fields, name, step),
                                          field(name, step, version=2 if (name, step) == ("T", 1) else 1))
    for step in (0, 1):
        np.testing.assert_array_equal(read_array(seed.series, "n", step), series(step))
    np.testing.assert_array_equal(read_array(seed.parts, "pos", 0), ROWS)
    for path in (seed.fields, seed.parts, seed.series):
        got = cli("describe", str(path), "--verify", "--json")
        assert got.exit_code == 0, got.output
        assert json.loads(got.output) == {**index_of(path), "described_bytes": footer(path.read_bytes())[0]}
