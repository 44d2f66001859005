"""``benchmarks/async.py --quick`` end to end at a tiny size (real MPI jobs, real SQLite catalogs).

Only what was run and written is checked, never the machine's timing: every mode of every
contender ran, every nonblocking dump ended written, all jobs of a contender computed the
same values, h is evaluated and nothing is left in the scratch directory. Without the peer
stack (``make peers``) SDM runs alone on this Python's MPI; with it, ADIOS2 BP5 runs too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quick_bench import REPO, run_quick  # tests/integration is on sys.path


def _rows(data: dict) -> list[dict]:
    s = data["samples"]
    return [dict(zip(s["fields"], row)) for row in s["rows"]]


def _quick(tmp_path: Path, contenders: str, peers: Path) -> tuple[dict, Path]:
    out, work = tmp_path / "results", tmp_path / "disk"
    work.mkdir()
    data = run_quick("async", out, "--n", "16", "--steps", "2", "--places", "disk", "--disk", str(work),
                     "--contenders", contenders, "--peers", str(peers))
    assert list(work.iterdir()) == []  # nothing left behind
    return data, out


def _check(data: dict, out: Path, contenders: set[str]) -> None:
    assert not data["problems"], data["problems"]
    rows = _rows(data)
    assert {(r["contender"], r["mode"]) for r in rows} == {(c, m) for c in contenders
                                                          for m in ("compute", "sync", "async")}
    for r in rows:
        assert r.get("error") is None, r
        assert r["seconds"] > 0 and r["compute"] > 0
        assert r["bytes"] == (0 if r["mode"] == "compute" else 16 ** 3 * 4 * 4 * 2)
        if r["contender"] == "sdm" and r["mode"] == "async":
            assert r["handles"] == 2 and r["states"] == "done" and r["handle_seconds"] > 0
            assert 0 < r["handle_cpu"] <= r["handle_cpu_max"] and r["handle_cpu"] <= r["handle_seconds"] + 0.05
    for c in contenders:
        assert data["calibration"][f"disk|2|{c}"]["sweeps"] >= 1
        assert data["summary"][f"disk|2|{c}"]["h"]["n"] == 1
        assert data["summary"][f"disk|2|{c}"]["h_bound"]["n"] == 1
    assert any("h >= 0.8" in g["goal"] for g in data["goals"])
    md = (out / "async.md").read_text()
    assert "## Goals" in md and "| disk | 2 | SDM |" in md
    assert data["meta"]["git_commit"] and data["meta"]["sdm_version"] and data["options"]["n"] == 16


@pytest.mark.timeout(120)
def test_quick_run_measures_sdm_alone(tmp_path: Path) -> None:
    data, out = _quick(tmp_path, "sdm", tmp_path / "no-stack")
    _check(data, out, {"sdm"})
    assert "peer stack is not built" in data["not_run"]


@pytest.mark.timeout(120)
def test_quick_run_on_the_peer_stack_measures_adios2_too(tmp_path: Path) -> None:
    peers = REPO / ".peers"
    if not (peers / "bin" / "async_adios2").exists():
        pytest.skip("the peer stack's async_adios2 is not built (`make peers`): only the SDM-only run is tested")
    data, out = _quick(tmp_path, "sdm,adios2", peers)
    _check(data, out, {"sdm", "adios2"})
    assert any("AsyncWrite=On" in g["goal"] for g in data["goals"])
