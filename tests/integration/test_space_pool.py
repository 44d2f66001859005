"""File space reserved ahead (sdm.engine.space): one transaction for many dumps, nothing lost in a crash.

A writer killed with SIGKILL after some dumps leaves space reserved past its file's end:
``sdm verify`` reports it, ``sdm gc`` gives it back (the file's high-water mark comes down to
its last byte), and nothing else changes: the committed rows, their bytes (compared with
numpy) and the file itself.  A session that closes gives its unused space back itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import sdm
from sdm.engine.space import FIRST_DUMPS, MAX_CHUNK, SpacePool
from sdm.maintenance import gc_run, verify_run

pytestmark = pytest.mark.timeout(120)

COUNT, LENGTH = 16, 64  # datasets per dump, f8 elements each


def values(name: int, step: int) -> np.ndarray:
    return np.arange(LENGTH, dtype="<f8") * 0.5 + 1000 * step + name


WRITER = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import sdm
    root, url, steps, crash = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "crash"
    count, length = int(sys.argv[5]), int(sys.argv[6])
    s = sdm.open("pool", "w", root=root, catalog=url)
    g = s.make_group("g", [f"v{i}" for i in range(count)], dtype="<f8", shape=(length,), level=3)
    for step in range(steps):
        g.write_step(step, {f"v{i}": np.arange(length, dtype="<f8") * 0.5 + 1000 * step + i for i in range(count)})
    if crash:
        os.kill(os.getpid(), signal.SIGKILL)
    s.close()
""")


def run_writer(tmp_path: Path, steps: int, crash: bool) -> tuple[Path, str]:
    root, url = tmp_path / "data", f"sqlite:///{tmp_path}/cat.db"
    proc = subprocess.run([sys.executable, "-c", WRITER, str(root), url, str(steps), "crash" if crash else "close",
                           str(COUNT), str(LENGTH)],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == (-9 if crash else 0), proc.stderr
    return root, url


def marks(tmp_path: Path) -> dict[str, int]:
    con = sqlite3.connect(tmp_path / "cat.db")
    try:
        return {p: e for p, e in con.execute("SELECT path, alloc_end FROM files")}
    finally:
        con.close()


def rows(tmp_path: Path) -> list[tuple]:
    con = sqlite3.connect(tmp_path / "cat.db")
    try:
        return sorted(con.execute("SELECT d.name, w.step, f.path, w.offset, w.nbytes, w.checksum FROM writes w "
                                  "JOIN files f ON f.id = w.file_id JOIN datasets d ON d.id = w.dataset_id"))
    finally:
        con.close()


def check_bytes(root: Path, found: list[tuple], steps: int) -> None:
    assert len(found) == COUNT * steps
    for name, step, path, offset, nbytes, _ in found:
        got = np.fromfile(root / path, dtype="<f8", count=LENGTH, offset=offset)
        np.testing.assert_array_equal(got, values(int(name[1:]), step))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_crash_leaves_reserved_space_verify_reports_gc_gives_back(tmp_path):
    root, url = run_writer(tmp_path, 3, crash=True)
    found = rows(tmp_path)
    check_bytes(root, found, 3)
    (path, mark), = marks(tmp_path).items()
    size = (root / path).stat().st_size
    written = COUNT * LENGTH * 8 * 3
    assert size == written  # the file holds what was written, no more
    assert mark == COUNT * LENGTH * 8 * FIRST_DUMPS  # the first chunk: 8 dumps' worth, one transaction
    before = digest(root / path)
    cat = sdm.Catalog(url)
    try:
        (run,) = cat.find(application="pool")
        report = verify_run(cat, run.id)
        assert report.ok and report.rows == COUNT * 3 and report.unreferenced == []
        assert [(u.path, u.offset, u.nbytes) for u in report.reserved] == [(path, written, mark - written)]
        assert report.reserved_bytes == mark - written
        gc = gc_run(cat, run.id)
        assert gc.reserved_given_back == mark - written and gc.bytes_reclaimed == 0
        again = verify_run(cat, run.id)
        assert again.ok and again.reserved == [] and again.unreferenced == []
    finally:
        cat.close()
    assert marks(tmp_path) == {path: written}
    assert rows(tmp_path) == found and digest(root / path) == before  # nothing else changed


def test_cli_verify_names_reserved_space(tmp_path):
    root, url = run_writer(tmp_path, 1, crash=True)
    cat = sdm.Catalog(url)
    try:
        (run,) = cat.find(application="pool")
    finally:
        cat.close()
    out = subprocess.run([sys.executable, "-m", "sdm", "verify", str(run.id), "--catalog", url, "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (got,) = json.loads(out.stdout)["runs"]
    written = COUNT * LENGTH * 8
    assert got["reserved_bytes"] == COUNT * LENGTH * 8 * FIRST_DUMPS - written
    text = " ".join(subprocess.run([sys.executable, "-m", "sdm", "verify", str(run.id), "--catalog", url],
                                   capture_output=True, text=True, timeout=60).stdout.split())  # unwrapped
    assert "reserved past the ends of 1 files and never written" in text and f"sdm gc {run.id}" in text


def test_a_closed_session_gives_its_space_back(tmp_path):
    root, _ = run_writer(tmp_path, 3, crash=False)
    (path, mark), = marks(tmp_path).items()
    assert mark == (root / path).stat().st_size  # the data, then the trailer right after it: no gap
    check_bytes(root, rows(tmp_path), 3)


def test_pool_chunks():
    calls = []
    ends = {"a": 100, "b": 0}

    def reserve(wanted):
        calls.append(list(wanted))
        out = []
        for path, n in wanted:
            out.append(ends[path])
            ends[path] += n
        return out

    pool = SpacePool(reserve)
    assert pool.take([("a", 10), ("a", 5), ("b", 1)]) == [100, 110, 0]
    assert calls == [[("a", 15 * FIRST_DUMPS), ("b", FIRST_DUMPS)]]  # one transaction for both files
    for k in range(1, FIRST_DUMPS):  # the rest of the first chunk: no transaction
        assert pool.take([("a", 10), ("a", 5)]) == [100 + 15 * k, 110 + 15 * k]
    assert len(calls) == 1
    assert pool.take([("a", 15)]) == [100 + 15 * FIRST_DUMPS]  # the next chunk follows: doubled, contiguous
    assert calls[-1] == [("a", 2 * 15 * FIRST_DUMPS)]
    ends["a"] += 7  # another writer reserves after our chunk
    pool.take([("a", 15 * 2 * FIRST_DUMPS)])  # more than is left: a chunk after the other writer's bytes
    assert pool.unused()[0][0] == "a"
    assert ("a", 100 + 15 * FIRST_DUMPS * 3 + 7 + 15 * 2 * FIRST_DUMPS, ends["a"]) in pool.unused()
    assert pool.take([("b", 3 * MAX_CHUNK)]) == [1]  # larger than the largest chunk: right after the first one
    assert calls[-1] == [("b", 3 * MAX_CHUNK)]
    pool.clear()
    assert pool.unused() == []
