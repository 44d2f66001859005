"""Ranked sections across rank counts and through ``sdm rebuild``.

An MPI job (``_ranked_job.py``, under ``mpiexec`` in a subprocess with a time limit)
writes ranked rows at 3 ranks on levels 1 and 3; jobs of 1, 2 and 4 ranks read them
back (a balanced share of the rows, ranges of writer ranks, the header's counts), every
value compared with numpy references.  Then the catalog is lost, rebuilt from the run's
meta-file, and a 2-rank job reads everything again: the rebuilt datasets are still
ranked and every step's row, with its own ``nbytes``, is whole.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sdm.catalog import Catalog
from sdm.catalog.rebuild import rebuild

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import test_rebuild as rebuild_test  # noqa: E402 - its MPI job runner

MPIEXEC, LIMIT = rebuild_test.MPIEXEC, rebuild_test.LIMIT
WRITERS = 3


def mpi(ranks: int, *args: str) -> str:
    return rebuild_test.mpi(ranks, *args, job="_ranked_job.py")


@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to this Python")
@pytest.mark.timeout(6 * LIMIT)
def test_written_at_three_read_at_others_and_rebuilt(tmp_path):
    data, url = tmp_path / "data", f"sqlite:///{tmp_path}/cat.db"
    out = mpi(WRITERS, "write", str(data), url)
    run = int(next(line for line in out.splitlines() if line.startswith("RUN ")).split()[1])
    reads = 2 * 2 * 3  # levels x (share, range) x steps, per rank
    for ranks in (1, 2, 4):
        assert f"READ OK {reads * ranks}" in mpi(ranks, "read", url, str(run), str(WRITERS))
    rebuilt = f"sqlite:///{tmp_path}/rebuilt.db"
    assert rebuild(data, rebuilt).added == [run]
    cat = Catalog(rebuilt, create=False)
    try:
        for level in (1, 3):
            ds = cat.group(run, f"l{level}").dataset("p")
            assert ds.distribution == {"kind": "ranked"} and list(ds.steps) == [0, 1, 2]
            assert [cat.lookup_write(ds.id, s).nbytes for s in (0, 1, 2)] == \
                [48 + 8 * WRITERS + 16 * sum((r + s) % 4 for r in range(WRITERS)) for s in (0, 1, 2)]
    finally:
        cat.close()
    assert f"READ OK {reads * 2}" in mpi(2, "read", rebuilt, str(run), str(WRITERS))
