"""``sdm verify`` and ``sdm gc`` on a run laid out by hand (no MPI): files written with numpy,
rows recorded through the Catalog API with checksums from an independent numpy formula."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sdm._cli.main import app
from sdm.catalog import Catalog, DatasetSpec
from sdm.storage.runs import make_run_dir

pytestmark = pytest.mark.timeout(60)

SHAPE = (16, 8)
N = int(np.prod(SHAPE))


def mix64(data: np.ndarray) -> str:
    """mix64-v2 of a whole dataset of 8-byte elements, written out from the formula."""
    w = np.ascontiguousarray(data).view("<u8").ravel()
    p = np.arange(w.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = w ^ (p * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x243F6A8885A308D3))
        x ^= x >> np.uint64(33)
        x *= np.uint64(0xFF51AFD7ED558CCD)
        x ^= x >> np.uint64(33)
        x *= np.uint64(0xC4CEB9FE1A85EC53)
        x ^= x >> np.uint64(33)
    return f"{int(x.sum(dtype=np.uint64)):016x}"


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": None})


@pytest.fixture
def run(tmp_path: Path) -> dict:
    """A level-3 run: step 0 of 'a' committed twice (version 1's bytes now unreferenced), step 1 once,
    and a level-1 file that no row refers to (a crashed write's reservation)."""
    url = f"sqlite:///{tmp_path}/catalog.db"
    cat = Catalog(url)
    rid = cat.create_run("app", nprocs=1, root=str(tmp_path),
                         make_dir=lambda r: make_run_dir(tmp_path, "app", r, cat.id))
    rel = cat.run(rid).dir
    (a,) = cat.define_group(rid, "g", 3, [DatasetSpec("a", "<f8", SHAPE, "C")]).datasets
    versions = [np.arange(N, dtype="<f8") + 1000 * v for v in range(3)]
    path = f"{rel}/g.sdm"
    with open(tmp_path / path, "wb") as f:
        for v in versions:
            f.write(v.tobytes())
    rows = [(0, 0, 1, None, versions[0]), (1, 2 * 8 * N, 1, None, versions[2]), (0, 8 * N, 2, 1, versions[1])]
    for step, offset, version, replaces, data in rows:
        cat.record_write(run_id=rid, dataset_id=a.id, step=step, path=path, level=3, offset=offset, nbytes=8 * N,
                         checksum=mix64(data), checksum_algo="mix64-v2", method="posix", seconds=0.1, nprocs=1,
                         overwrite=replaces is not None, version=version, replaces=replaces)
    (tmp_path / rel / "g.b.s00000003.sdm").write_bytes(b"\1" * 4096)
    cat.close()
    return {"url": url, "run": rid, "root": tmp_path, "rel": rel, "path": path}


def test_verify_a_whole_run(run: dict) -> None:
    result = cli("verify", str(run["run"]), "--catalog", run["url"])
    assert result.exit_code == 0, result.output
    # registered open, yet no session holds it (nobody wrote it through SDM): found interrupted
    assert result.stdout.strip() == (
        f"run {run['run']} (interrupted): 2 rows, 2 checksums over 2.0 KiB: ok; 5.0 KiB unreferenced in 2 places "
        f"(`sdm gc {run['run']}` reclaims them)"
    )
    data = json.loads(cli("verify", str(run["run"]), "--catalog", run["url"], "--json").stdout)
    (r,) = data["runs"]
    assert (r["ok"], r["rows"], r["checksums_checked"], r["unreferenced_bytes"]) == (True, 2, 2, 8 * N + 4096)
    assert sorted((u["path"], u["offset"], u["nbytes"], u["whole_file"]) for u in r["unreferenced"]) == [
        (f"{run['rel']}/g.b.s00000003.sdm", 0, 4096, True), (run["path"], 0, 8 * N, False)]


def test_verify_names_a_damaged_row_and_exits_1(run: dict) -> None:
    with open(run["root"] / run["path"], "r+b") as f:  # one value of step 1 (the third block)
        f.seek(2 * 8 * N + 8 * 5)
        f.write(np.float64(-3.25).tobytes())
    result = cli("verify", str(run["run"]), "--catalog", run["url"], "--json")
    assert result.exit_code == 1
    (r,) = json.loads(result.stdout)["runs"]
    (p,) = r["problems"]
    assert (p["group"], p["dataset"], p["step"], p["path"]) == ("g", "a", 1, run["path"])
    assert p["problem"].startswith("checksum ") and p["problem"].endswith(
        f"(mix64-v2) does not match the recorded {mix64(np.arange(N, dtype='<f8') + 2000)}")


def test_verify_reports_a_missing_file(run: dict) -> None:
    (run["root"] / run["path"]).unlink()
    result = cli("verify", str(run["run"]), "--catalog", run["url"])
    assert result.exit_code == 1
    assert f"run {run['run']} (interrupted): 2 rows, 0 checksums over 0 B: 2 damaged rows" in result.stdout
    assert "file missing (No such file or directory)" in result.stdout


def test_gc_reclaims_and_verify_then_finds_nothing(run: dict) -> None:
    before = (run["root"] / run["path"]).read_bytes()
    result = cli("gc", str(run["run"]), "--catalog", run["url"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (f"run {run['run']}: reclaimed 5.0 KiB (1 files removed, 1 ranges freed, "
                                     "0 tails cut)")
    after = (run["root"] / run["path"]).read_bytes()
    assert after[:8 * N] == bytes(8 * N)  # the superseded version: a hole, reading as zeros
    assert after[8 * N:] == before[8 * N:]  # the committed versions, byte for byte
    assert not (run["root"] / run["rel"] / "g.b.s00000003.sdm").exists()
    result = cli("verify", str(run["run"]), "--catalog", run["url"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"run {run['run']} (interrupted): 2 rows, 2 checksums over 2.0 KiB: ok; 0 B " \
                                    "unreferenced in 0 places"


def test_verify_without_a_run_checks_the_catalog(run: dict, tmp_path: Path) -> None:
    result = cli("verify", "--catalog", run["url"])
    assert (result.exit_code, result.stdout.strip()) == (0, "catalog ok: integrity check passed, schema revision current")
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    result = cli("verify", "--catalog", f"sqlite:///{empty}")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip() == (f"error: catalog 'sqlite:///{empty}': the file {empty} is empty (0 bytes); a "
                                     "catalog file is never empty, so it was truncated or damaged. Restore it from "
                                     "a backup; SDM does not replace it by a new catalog")
    assert empty.read_bytes() == b""


def test_unknown_run(run: dict) -> None:
    for command in ("verify", "gc"):
        result = cli(command, "99", "--catalog", run["url"])
        assert result.exit_code == 1 and "Traceback" not in result.output
        assert result.stderr.strip().startswith("error: no run 99 in catalog")


def test_ls_and_show_find_an_interrupted_run(run: dict) -> None:
    """The run is registered open, but no session holds its lock: its writers are gone."""
    shown = json.loads(cli("show", str(run["run"]), "--catalog", run["url"], "--json").stdout)
    assert (shown["run"]["state"], shown["run"]["dir"]) == ("interrupted", run["rel"])
    listed = json.loads(cli("ls", "app", "--catalog", run["url"], "--json").stdout)
    assert [(r["id"], r["state"]) for r in listed["runs"]] == [(run["run"], "interrupted")]
    cat = Catalog(run["url"], create=False)
    assert cat.run(run["run"]).state == "interrupted"  # recorded, not only shown
    cat.close()


def _on_a_terminal(*args: str) -> tuple[int, str, bytes]:
    """Run ``sdm ARGS`` with stderr on a pseudo-terminal: exit status, stdout, what stderr's terminal got."""
    import os
    import pty
    import select
    import subprocess
    import sys

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]), "TERM": "xterm"}
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "sdm", *args], stdout=subprocess.PIPE, stderr=slave, env=env)
        os.close(slave)
        out, _ = proc.communicate(timeout=60)
        seen = b""
        while select.select([master], [], [], 0.5)[0]:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the terminal's other end is closed: all was read
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
    return proc.returncode, out.decode(), seen


@pytest.mark.parametrize("command", ["verify", "gc"])
def test_a_progress_bar_on_a_terminal_leaves_json_clean(run: dict, command: str) -> None:
    code, out, terminal = _on_a_terminal(command, str(run["run"]), "--catalog", run["url"], "--json")
    assert code == 0, (out, terminal)
    (report,) = json.loads(out)["runs"]  # stdout holds the JSON only
    assert report["run" if command == "verify" else "run_id"] == run["run"]
    assert b"open the catalog" in terminal  # drawn from the start, before the catalog is opened
    assert b"\x1b[" in terminal  # a bar (terminal control sequences), on stderr only


def test_no_progress_bar_off_a_terminal(run: dict) -> None:
    import subprocess
    import sys

    src = str(Path(__file__).resolve().parents[2] / "src")
    out = subprocess.run([sys.executable, "-m", "sdm", "verify", str(run["run"]), "--catalog", run["url"], "--json"],
                         capture_output=True, text=True, timeout=60, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and out.stderr == ""
    assert json.loads(out.stdout)["runs"][0]["ok"] is True


def test_verify_a_structured_dataset(tmp_path: Path) -> None:
    """A structured dtype's catalog text (its field list) is read back as the dtype the checksum needs; a
    damaged byte is then found like any other."""
    import sdm

    dt = np.dtype([("a", "<f8"), ("b", "<i4")])
    x = np.zeros(6, dt)
    x["a"], x["b"] = np.arange(6) * 0.5, -np.arange(6)
    url = f"sqlite:///{tmp_path}/catalog.db"
    with sdm.open("rec", "w", root=str(tmp_path), catalog=url) as s:
        s.make_group("g", ["r"], dtype=dt, shape=(6,), level=3).write("r", 0, x)
        rid, path = s.run_id, tmp_path / s.run_dir / "g.sdm"
    result = cli("verify", str(rid), "--catalog", url)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"run {rid} (closed): 1 rows, 1 checksums over 72 B: ok; 0 B unreferenced in 0 places"
    assert path.read_bytes()[: x.nbytes] == x.tobytes()  # the bytes numpy makes of the records, at offset 0
    raw = bytearray(path.read_bytes())
    raw[9] ^= 0xFF
    path.write_bytes(bytes(raw))
    damaged = cli("verify", str(rid), "--catalog", url)
    assert damaged.exit_code == 1 and "checksum" in damaged.stdout, damaged.output
