"""``benchmarks/compression.py --quick`` end to end at a tiny size (real MPI jobs, real SQLite catalogs).

Only what was run and written is checked, never the machine's timing: every job of the
selection ran and was checked (lossless values exact, ZFP within its tolerance), the ratios
are those of compressed data, the goals are evaluated, and nothing is left in the scratch
directories. Without the peer stack (``make peers``) SDM runs alone on this Python's MPI and
the results say why the others did not; with it, parallel HDF5 runs too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quick_bench import REPO, run_quick  # tests/integration is on sys.path

CODECS = "none,zstd:1:shuffle,zfp:tolerance=0.001"


def _rows(data: dict) -> list[dict]:
    s = data["samples"]
    return [dict(zip(s["fields"], row)) for row in s["rows"]]


def _check(data: dict, out: Path, contenders: set[str]) -> None:
    rows = _rows(data)
    assert not data["problems"], data["problems"]
    assert {r["contender"] for r in rows if r["seconds"] is not None} == contenders
    for r in rows:
        assert r.get("error") is None, r
        if r["seconds"] is None:
            continue
        assert r["seconds"] > 0 and r["bytes"] > 0
        if r["op"] == "write":
            assert r["stored"] > 0
            if r["codec"] != "none":
                assert r["stored"] < r["bytes"]  # the smooth field compresses
        elif r["codec"] == "zfp:tolerance=0.001":
            assert 0 < r["max_error"] <= 1e-3 == r["bound"]
        else:
            assert r["mismatches"] == 0 and r["max_error"] == 0
    ops = {(r["codec"], r["contender"], r["op"]) for r in rows if r["contender"] == "sdm"}
    assert ops == {(c, "sdm", op) for c in CODECS.split(",") for op in ("write", "read", "box")}
    goals = {g["goal"]: g for g in data["goals"]}
    assert any("ZFP tolerance 1e-3" in g and "largest error" in v["figures"] for g, v in goals.items())
    assert any("1 % box of zstd:1:shuffle" in g for g in goals)
    md = (out / "compression.md").read_text()
    assert "## Goals" in md and "| smooth | zstd:1:shuffle | SDM |" in md
    assert data["meta"]["git_commit"] and data["meta"]["sdm_version"] and data["options"]["n"] == 16


def _quick(tmp_path: Path, *extra: str) -> tuple[dict, Path]:
    out, work = tmp_path / "results", tmp_path / "disk"
    work.mkdir()
    data = run_quick("compression", out, "--n", "16", "--nprocs", "2", "--places", "disk", "--disk", str(work),
                     "--fields", "smooth", "--codecs", CODECS, *extra)
    assert list(work.iterdir()) == []  # nothing left behind
    return data, out


@pytest.mark.timeout(180)
def test_quick_run_without_the_peer_stack_measures_sdm_alone(tmp_path: Path) -> None:
    data, out = _quick(tmp_path, "--peers", str(tmp_path / "no-stack"))
    _check(data, out, {"sdm"})
    assert "peer stack is not built" in data["not_run"]
    assert "Not run: the peer stack is not built" in (out / "compression.md").read_text()


@pytest.mark.timeout(240)
def test_quick_run_on_the_peer_stack_checks_hdf5_too(tmp_path: Path) -> None:
    peers = REPO / ".peers"
    if not (peers / "venv" / "bin" / "python").exists():
        pytest.skip("the peer stack is not built (`make peers`): only the SDM-only run is tested")
    data, out = _quick(tmp_path, "--peers", str(peers))
    contenders = {"sdm", "hdf5"} | ({"adios2"} if (peers / "bin" / "compress_adios2").exists() else set())
    _check(data, out, contenders)
    assert any("zstd:1:shuffle write >= 1.5x parallel HDF5" in g["goal"] for g in data["goals"])
