"""Property-based fuzzing (Hypothesis) of the files SDM reads back (``sdm.file_formats``).

Seeds are real files written by SDM (``format_seeds``: data files with trailers, a
meta-file and its backup, a run marker) and files made by SDM's own writers (an index
history's description, a superfile's index, a cache index).  Each case mutates one as a
careless copy or an attacker would: raw bytes (bit flips, truncations, insertions,
zeroed ranges), or the JSON inside with its CRC recomputed (type swaps, huge and
negative numbers, members deleted or wrapped, deep nesting, hostile text).  Every case
must be a correct parse (its bytes then read back as the parse says, or fail their
checksum) or an :class:`sdm.errors.IntegrityError` -- never another exception, never a
hang -- and the memory a parse takes stays a small multiple of the file's size.

At least 2,000 cases run in CI (``SDM_FUZZ_FORMATS=2`` doubles them, ``0.1`` for a quick look).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import shutil
import struct
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from format_seeds import Seed, write_seed_run
from sdm.catalog.metafile import BACKUP, META, read_description, read_meta
from sdm.catalog.rebuild import _replay, rebuild
from sdm.errors import CatalogVersionError, IntegrityError
from sdm.file_formats import MAX_DEPTH, Where, check_history
from sdm.storage import runs
from sdm.storage.trailer import encode, read_step, read_trailer

SCALE = float(os.environ.get("SDM_FUZZ_FORMATS", "1"))
#: Cases per test at scale 1 (their sum is what CI runs: at least 2,000).
CASES = {"trailer_bytes": 400, "trailer_json": 500, "meta_json": 450, "meta_bytes": 250, "meta_rebuild": 40,
         "marker": 150, "history": 100, "cache_index": 100, "superfile": 100, "memory": 150}
RAN: dict[str, int] = dict.fromkeys(CASES, 0)
#: Outcomes seen (accepted parses, IntegrityErrors, version errors), for the summary.
SEEN: dict[str, int] = {"accepted": 0, "IntegrityError": 0, "CatalogVersionError": 0}

pytestmark = pytest.mark.timeout(600)


def fuzz(name: str) -> settings:
    return settings(max_examples=max(1, int(CASES[name] * SCALE)), deadline=None, derandomize=True, database=None,
                    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
                    print_blob=False)


class _Summary:
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if any(RAN.values()):
            terminalreporter.write_line(f"fuzz (file formats): {sum(RAN.values())} cases {RAN}; outcomes {SEEN}")


@pytest.fixture(scope="module", autouse=True)
def summary(request: pytest.FixtureRequest) -> None:
    if not request.config.pluginmanager.has_plugin("sdm-fuzz-formats"):
        request.config.pluginmanager.register(_Summary(), "sdm-fuzz-formats")


# ----------------------------------------------------------------------------- seeds
@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Seed:
    return write_seed_run(tmp_path_factory.mktemp("seed"))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def footer(raw: bytes) -> tuple[int, int]:
    magic, start, length, crc, version = struct.unpack("<8sQQII", raw[-32:])
    assert (magic, version) == (b"SDMTRAIL", 1)
    return start, length


def split_trailer(raw: bytes) -> tuple[bytes, dict[str, Any]]:
    """The data bytes before a trailer and the trailer's JSON."""
    start, length = footer(raw)
    return raw[:start], json.loads(raw[start:start + length])


def trailer_bytes(data: bytes, body: bytes) -> bytes:
    return data + body + struct.pack("<8sQQII", b"SDMTRAIL", len(data), len(body), zlib.crc32(body), 1)


def meta_line(body: bytes) -> bytes:
    """A meta-file line of the JSON object text *body*, its CRC as docs/format.md computes it."""
    return body[:-1] + b',"crc":"' + f"{zlib.crc32(body):08x}".encode() + b'"}'


# ----------------------------------------------------------------------------- mutations
HOSTILE = [None, True, False, 0, -1, 1, 7, 2**31, 2**53 + 1, 2**63, 2**64, 10**15, -(10**15), 10**400, 1e9, 1.5,
           -0.0, math.inf, -math.inf, math.nan, "", "O", "96", "<f8", "|O", "V8", "S1000000000", "<U0",
           "[('a', '<f8'), ('b', 'O')]", "x" * 300, "é", "\ud800", "\x00", "../x", "/etc/passwd", "ranked",
           "2026-13-45", [], {}, [1e9, 1e9], [10**9, 10**9], [-1], [0], {"kind": "ranked"}, {"kind": 1}, [[0, 1]]]

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                         st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                  st.dictionaries(st.text(max_size=6), inner,
                                                                                  max_size=3)), max_leaves=6)
replacements = st.one_of(st.sampled_from(HOSTILE), json_values,
                         st.integers(MAX_DEPTH - 2, MAX_DEPTH + 3).map(lambda d: "@DEEP%d@" % d),
                         st.just("@DEEP5000@"))


@st.composite
def paths(draw: Any, value: Any) -> list[Any]:
    """A path into *value*: keys and indexes, chosen one level at a time."""
    out: list[Any] = []
    node = value
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)) > 0:
        key = draw(st.sampled_from(sorted(node))) if isinstance(node, dict) else draw(st.integers(0, len(node) - 1))
        out.append(key)
        node = node[key]
    return out


@st.composite
def json_mutation(draw: Any, value: Any) -> tuple[Any, int]:
    """*value* (a deep copy) with one to three changes: set, delete, wrap, type swap, huge number; and the
    depth of any deep nesting to put in (0: none)."""
    value = copy.deepcopy(value)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(paths(value))
        if not path:
            if draw(st.booleans()):
                value = draw(replacements)
            continue
        parent: Any = value
        for key in path[:-1]:
            parent = parent[key]
        key, old = path[-1], parent[path[-1]]
        op = draw(st.sampled_from(["set", "delete", "wrap", "swap", "number"]))
        if op == "delete":
            del parent[key]
        elif op == "wrap":
            parent[key] = [old]
        elif op == "swap":
            parent[key] = (str(old) if not isinstance(old, str) else
                           (int(old) if old.isdigit() else len(old)))
        elif op == "number":
            parent[key] = draw(st.sampled_from([-1, 0, 2**53, 2**63 - 1, 2**63, 10**15, -(10**15), 10**30, 1e300]))
        else:
            parent[key] = draw(replacements)
    return value


def dump(value: Any, ascii_only: bool) -> bytes:
    """JSON bytes of a mutated value; deep-nesting markers expanded; lone surrogates kept as invalid UTF-8."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only)
    while "\"@DEEP" in text:
        at = text.index("\"@DEEP")
        end = text.index("@\"", at + 6)
        depth = int(text[at + 6:end])
        text = text[:at] + "[" * depth + "]" * depth + text[end + 2:]
    return text.encode("utf-8", "surrogatepass")


@st.composite
def byte_mutation(draw: Any, raw: bytes, hot: int = 0) -> bytes:
    """*raw* with one to four byte-level changes, half of them in its last *hot* bytes (trailer, footer)."""
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        lo = max(0, len(data) - hot) if hot and draw(st.booleans()) else 0
        at = draw(st.integers(lo, len(data) - 1))
        op = draw(st.sampled_from(["flip", "byte", "truncate", "insert", "delete", "zero"]))
        if op == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte":
            data[at] = draw(st.integers(0, 255))
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 16))]
        else:
            n = draw(st.integers(1, 64))
            data[at:at + n] = bytes(len(data[at:at + n]))
    return bytes(data)


# ----------------------------------------------------------------------------- what every case must do
def outcome(fn: Any, *allowed: type[BaseException]) -> Any:
    """fn()'s value, or the IntegrityError (or one of *allowed*) it raised; anything else fails the case."""
    try:
        value = fn()
    except (IntegrityError, *allowed) as exc:
        assert str(exc), "an error without a message"
        SEEN[type(exc).__name__] = SEEN.get(type(exc).__name__, 0) + 1
        return exc
    SEEN["accepted"] += 1
    return value


def check_data_file(path: Path) -> None:
    """A mutated data file: its trailer parses to what the bytes hold, or it is refused."""
    got = outcome(lambda: read_trailer(path))
    if isinstance(got, IntegrityError):
        assert str(got).startswith(str(path)), str(got)
        return
    size = path.stat().st_size
    assert 0 <= got["described_bytes"] <= size
    if got.get("superfile"):
        assert all(m["offset"] + m["size"] <= got["described_bytes"] for m in got["members"])
        return
    for w in got["writes"]:
        assert 0 <= w["offset"] and w["offset"] + w["nbytes"] <= got["described_bytes"]
        arr = outcome(lambda: read_step(path, got, w, verify=True))
        if isinstance(arr, np.ndarray):
            spec = got["datasets"][w["dataset"]]
            assert arr.dtype.str == np.dtype(spec["dtype"]).str or arr.dtype.fields is not None
            ranked = (spec.get("distribution") or {}).get("kind") == "ranked"
            assert arr.shape[1 if ranked else 0:] == tuple(spec["shape"])
            assert arr.nbytes <= w["nbytes"]


def assert_newer(exc: CatalogVersionError) -> None:
    """A version error only for what a newer SDM writes: a higher format version or a new record type."""
    assert re.search(r"line \d+: (meta-file format version \d+ is newer than this SDM reads|record type '.*' is "
                     r"unknown to this SDM)", str(exc)), str(exc)


def check_run_dir(run_dir: Path) -> None:
    """A mutated run directory: its meta-file replays, or it is refused (a newer format is a version error)."""
    log = outcome(lambda: read_meta(run_dir), CatalogVersionError)
    if isinstance(log, CatalogVersionError):
        assert_newer(log)
        return
    if isinstance(log, IntegrityError):
        return
    run = outcome(lambda: _replay(log))  # a checked log always replays
    assert not isinstance(run, IntegrityError) or "does not start with a run record" in str(run)


# ----------------------------------------------------------------------------- data-file trailers
DATA_FILES = ["fields", "parts", "series"]


@fuzz("trailer_bytes")
@given(data=st.data(), which=st.sampled_from(DATA_FILES))
def test_bytes_of_a_data_file_changed(seed: Seed, work: Path, data: Any, which: str) -> None:
    RAN["trailer_bytes"] += 1
    raw = getattr(seed, which).read_bytes()
    path = work / "bytes.sdm"
    path.write_bytes(data.draw(byte_mutation(raw, hot=len(raw) - footer(raw)[0])))
    check_data_file(path)


@fuzz("trailer_json")
@given(data=st.data(), which=st.sampled_from(DATA_FILES), ascii_only=st.booleans())
def test_the_json_of_a_trailer_changed_with_a_valid_crc(seed: Seed, work: Path, data: Any, which: str,
                                                        ascii_only: bool) -> None:
    RAN["trailer_json"] += 1
    head, index = split_trailer(getattr(seed, which).read_bytes())
    path = work / "json.sdm"
    path.write_bytes(trailer_bytes(head, dump(data.draw(json_mutation(index)), ascii_only)))
    check_data_file(path)


def superfile_seed() -> tuple[bytes, dict[str, Any]]:
    """Two small files packed as ``sdm migrate --pack-below`` packs them (the real encoder), as bytes and index."""
    members = [b"a" * 100, b"b" * 60]
    index = {"format": 1, "superfile": True, "run": 3, "members": []}
    offset = 0
    for k, body in enumerate(members):
        index["members"].append({"path": f"app/run-3/f{k}.sdm", "offset": offset, "size": len(body),
                                 "checksum": f"sha256:{hashlib.sha256(body).hexdigest()}"})
        offset += len(body)
    return b"".join(members), index


@fuzz("superfile")
@given(data=st.data(), ascii_only=st.booleans(), raw=st.booleans())
def test_a_superfile_index_changed(work: Path, data: Any, ascii_only: bool, raw: bool) -> None:
    RAN["superfile"] += 1
    body, index = superfile_seed()
    blob = body + encode(index, len(body))
    path = work / "superfile.sdmpack"
    path.write_bytes(data.draw(byte_mutation(blob, hot=len(blob) - len(body))) if raw else
                     trailer_bytes(body, dump(data.draw(json_mutation(index)), ascii_only)))
    check_data_file(path)


@fuzz("memory")
@given(data=st.data(), which=st.sampled_from(DATA_FILES))
def test_a_parse_takes_memory_in_proportion_to_the_file(seed: Seed, work: Path, data: Any, which: str) -> None:
    """Huge numbers anywhere in a trailer (claimed lengths, shapes, offsets): the parse and the reads
    allocate a small multiple of the file's size, never what the numbers claim."""
    RAN["memory"] += 1
    head, index = split_trailer(getattr(seed, which).read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        path = data.draw(paths(index))
        if path:
            node: Any = index
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = data.draw(st.sampled_from([10**15, 2**53, 2**63 - 1, [10**9, 10**9], [2**31] * 3]))
    path = work / "memory.sdm"
    path.write_bytes(trailer_bytes(head, json.dumps(index).encode()))
    check_data_file(path)  # warm: imports and caches outside the measure
    tracemalloc.start()
    try:
        check_data_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    assert peak <= 32 * size + (64 << 10), f"{peak} bytes allocated for a {size}-byte file"


# ----------------------------------------------------------------------------- meta-files
@pytest.fixture(scope="module")
def meta_lines(seed: Seed) -> list[bytes]:
    return (seed.run_dir / META).read_bytes().split(b"\n")[:-1]


def write_meta(run_dir: Path, main: bytes, backup: bytes) -> None:
    (run_dir / META).write_bytes(main)
    (run_dir / BACKUP).write_bytes(backup)


@pytest.fixture(scope="module")
def run_copy(seed: Seed, work: Path) -> Path:
    target = work / "data" / "seed" / seed.run_dir.name
    shutil.copytree(seed.run_dir, target)
    return target


@fuzz("meta_json")
@given(data=st.data(), ascii_only=st.booleans(), both=st.booleans())
def test_a_meta_file_record_changed_with_a_valid_crc(meta_lines: list[bytes], run_copy: Path, data: Any,
                                                     ascii_only: bool, both: bool) -> None:
    RAN["meta_json"] += 1
    lines = list(meta_lines)
    k = data.draw(st.integers(0, len(lines) - 1))
    text = lines[k].decode()
    record = json.loads(text[:text.rindex(',"crc":')] + "}")
    mutated = data.draw(json_mutation(record))
    body = dump(mutated, ascii_only)
    lines[k] = meta_line(body) if body.endswith(b"}") else body
    blob = b"\n".join(lines) + b"\n"
    original = b"\n".join(meta_lines) + b"\n"
    write_meta(run_copy, blob, blob if both else original)
    check_run_dir(run_copy)


@fuzz("meta_bytes")
@given(data=st.data(), both=st.booleans())
def test_bytes_of_a_meta_file_changed(meta_lines: list[bytes], run_copy: Path, data: Any, both: bool) -> None:
    RAN["meta_bytes"] += 1
    original = b"\n".join(meta_lines) + b"\n"
    main = data.draw(byte_mutation(original))
    write_meta(run_copy, main, data.draw(byte_mutation(original)) if both else original)
    check_run_dir(run_copy)


@fuzz("meta_rebuild")
@given(data=st.data())
def test_a_changed_meta_file_rebuilds_or_is_refused(meta_lines: list[bytes], run_copy: Path, work: Path,
                                                    data: Any) -> None:
    """The whole rebuild (into a real SQLite catalog) of a run whose meta-file had a record changed."""
    RAN["meta_rebuild"] += 1
    lines = list(meta_lines)
    k = data.draw(st.integers(0, len(lines) - 1))
    text = lines[k].decode()
    body = dump(data.draw(json_mutation(json.loads(text[:text.rindex(',"crc":')] + "}"))), True)
    lines[k] = meta_line(body) if body.endswith(b"}") else body
    blob = b"\n".join(lines) + b"\n"
    write_meta(run_copy, blob, blob)
    catalog = work / "rebuilt.db"
    catalog.unlink(missing_ok=True)
    got = outcome(lambda: rebuild(run_copy, f"sqlite:///{catalog}"), CatalogVersionError)
    if isinstance(got, CatalogVersionError):
        assert_newer(got)
    elif not isinstance(got, IntegrityError):
        assert len(got.added) == 1


# ----------------------------------------------------------------------------- markers, descriptions, cache indexes
@fuzz("marker")
@given(data=st.data(), raw=st.booleans())
def test_a_run_marker_changed(seed: Seed, work: Path, data: Any, raw: bool) -> None:
    RAN["marker"] += 1
    original = (seed.run_dir / runs.MARKER).read_bytes()
    run_dir = work / "marker"
    run_dir.mkdir(exist_ok=True)
    (run_dir / runs.MARKER).write_bytes(data.draw(byte_mutation(original)) if raw else
                                        dump(data.draw(json_mutation(json.loads(original))), data.draw(st.booleans())))
    got = outcome(lambda: runs.read_marker(run_dir))
    if isinstance(got, dict):
        assert type(got["catalog"]) is str and type(got["run"]) is int and got["run"] >= 1
        assert runs.keeps_metafile(run_dir) is (got.get("metafile") is not False)


def history_seed(work: Path) -> bytes:
    """An index history's description, written by SDM's writer."""
    from datetime import datetime, timezone

    from sdm.catalog.irregular import HistoryPart
    from sdm.irregular.history import describe_history

    path = work / "mesh.abc.p2.idx"
    fields = dict(application="app", problem="mesh", content_hash="abc", nprocs=2, path="app/histories/mesh.idx",
                  nbytes=64, run_id=1, parts=[HistoryPart("nodes", r, 32 * r, 4, "<i8") for r in range(2)],
                  sources={"edges": "e.bin"})
    describe_history(path, fields, datetime(2026, 1, 2, tzinfo=timezone.utc), sync=False)
    return (work / "mesh.abc.p2.idx.json").read_bytes()


@fuzz("history")
@given(data=st.data(), raw=st.booleans())
def test_a_history_description_changed(work: Path, data: Any, raw: bool) -> None:
    RAN["history"] += 1
    original = history_seed(work)
    text = original.decode().rstrip("\n")
    body = dump(data.draw(json_mutation(json.loads(text[:text.rindex(',"crc":')] + "}"))), True)
    side = work / "described.json"
    side.write_bytes(data.draw(byte_mutation(original)) if raw else
                     (meta_line(body) if body.endswith(b"}") else body))
    got = outcome(lambda: read_description(side))
    if isinstance(got, dict):  # then checked against its history file (64 bytes), as rebuild does
        from sdm.catalog.irregular import HistoryPart

        assert all(isinstance(HistoryPart(*p).offset, int) for p in got["parts"])
        bounded = outcome(lambda: check_history(got, Where(str(side)), 64))
        if not isinstance(bounded, IntegrityError):
            assert all(p[2] + p[3] * np.dtype(p[4]).itemsize <= 64 and p[1] < got["nprocs"] for p in got["parts"])


@fuzz("cache_index")
@given(data=st.data(), raw=st.booleans())
def test_a_cache_index_changed(work: Path, data: Any, raw: bool) -> None:
    from sdm.io.remote import _index, _update_index

    RAN["cache_index"] += 1
    index = work / "cache.json"
    (work / "cache.bytes").write_bytes(bytes(256))
    index.unlink(missing_ok=True)
    _update_index(index, "sha256:c", "s3://b/k", [(0, 100), (128, 256)])  # what SDM writes
    original = index.read_bytes()
    index.write_bytes(data.draw(byte_mutation(original)) if raw else
                      dump(data.draw(json_mutation(json.loads(original))), True))
    got = _index(index, "sha256:c")  # never raises: a bad index is no index
    assert all(0 <= lo <= hi <= 256 for lo, hi in got)


def test_at_least_2000_cases_ran() -> None:
    """The module's cases together (when every test above ran at scale 1 or more)."""
    if SCALE < 1 or not all(RAN.values()):
        pytest.skip(f"only part of the harness ran: {RAN}")
    assert sum(RAN.values()) >= 2000, RAN
