"""``benchmarks/export.py``, ``partial_reads.py`` and ``fem.py`` with ``--quick``: every contender measured and
written (never the machine's timing), nothing left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from quick_bench import TIMEOUT, run_quick  # tests/integration is on sys.path


def _leftovers(disk: Path) -> list[str]:
    return sorted(p.name for where in (Path("/dev/shm"), disk) for p in where.glob(".sdm-*-bench-*"))


@pytest.mark.timeout(TIMEOUT + 60)
def test_export_bench_measures_every_format(tmp_path: Path) -> None:
    data = run_quick("export", tmp_path, "--disk", str(tmp_path), png=False)
    for place in ("/dev/shm", "disk"):
        assert set(data["places"][place]["contenders"]) == {"sdm read", "hdf5", "netcdf", "zarr"}
        assert all(len(c["seconds"]) == 1 for c in data["places"][place]["contenders"].values())
    assert data["goal"] == 0.5 and _leftovers(tmp_path) == []


@pytest.mark.timeout(TIMEOUT + 60)
def test_partial_reads_bench_measures_both_cases(tmp_path: Path) -> None:
    data = run_quick("partial_reads", tmp_path, "--disk", str(tmp_path), png=False)
    for place in ("/dev/shm", "disk"):
        cases = data["places"][place]["cases"]
        assert {c: cases[c]["goal"] for c in cases} == {"slab": 1.5, "series": 2.0}
        assert all(len(cases[c]["samples"][who]) == 1 for c in cases for who in ("sdm", "memmap"))
    assert _leftovers(tmp_path) == []


@pytest.mark.timeout(TIMEOUT + 60)
def test_fem_bench_compares_both_ways_and_the_export(tmp_path: Path) -> None:
    data = run_quick("fem", tmp_path, "--disk", str(tmp_path), png=False)  # exits non-zero if the files differ
    assert set(data["samples"]) == {"sdm", "gather + exodus"} and data["ranks"] == 4
    assert data["elements"] == 144 and data["export_seconds"] > 0 and data["export_bytes"] > 0
    assert _leftovers(tmp_path) == []
