"""kill -9 of writers between the meta-file's append and the catalog's commit.

The test holds a PostgreSQL lock that blocks inserts into ``writes`` (a reservation
touches ``files`` only, so the job still writes its bytes and appends its record): the job
then stops exactly where the meta-file knows one dump more than the catalog, and is
killed there with SIGKILL.  The original catalog must hold every step before it and not
that one; a catalog rebuilt from the data alone must hold that one too, and every row of
both must point at whole bytes equal to the job's numpy formula (checksums recomputed).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from sdm import integrity
from sdm.catalog import Catalog
from sdm.catalog.metafile import META, read_meta
from sdm.catalog.rebuild import rebuild

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
sys.path.insert(0, str(ROOT / "benchmarks"))
from _mpijob import Job  # noqa: E402
LIMIT = 120

sys.path.insert(0, str(HERE))
import _metakill_job as job  # noqa: E402

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(3 * LIMIT),
              pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to this Python")]


def _until(what: str, check, job: Job) -> None:
    end = time.monotonic() + LIMIT
    while not check():
        if job.proc.poll() is not None:
            pytest.fail(f"the job ended (exit {job.proc.returncode}) before {what}: {job.output()}")
        if time.monotonic() > end:
            pytest.fail(f"no {what} within {LIMIT} s")
        time.sleep(0.005)


def _committed(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as con:
            return int(con.execute(sa.text("SELECT count(*) FROM writes")).scalar_one())
    except sa.exc.ProgrammingError:  # the job has not made the schema yet
        return 0
    finally:
        engine.dispose()


def _dumps_recorded(data: Path) -> int:
    metas = list(data.glob(f"*/*/{META}"))
    if not metas:
        return 0
    return sum(1 for r in read_meta(metas[0].parent).records if r["t"] == "writes")


def _check_rows(url: str, data: Path) -> list[int]:
    """Every row's bytes, read with numpy, against the formula and the row's checksum; the steps."""
    cat = Catalog(url, create=False)
    try:
        (run,) = cat.find(application="metakill")
        rows = cat.writes(run.id)
    finally:
        cat.close()
    for _, _, w in rows:
        raw = np.fromfile(data / w.path, dtype=np.uint8, count=w.nbytes, offset=w.offset)
        assert raw.size == w.nbytes, f"step {w.step}: {raw.size} of {w.nbytes} bytes on disk"
        assert integrity.checksum_of_bytes(raw, "<f8", w.checksum_algo) == w.checksum, f"step {w.step}"
        np.testing.assert_array_equal(raw.view("<f8").reshape(job.SHAPE), job.reference(w.step))
    return sorted(w.step for _, _, w in rows)


def test_a_kill_between_the_meta_file_and_the_commit_loses_nothing(postgres_server, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with postgres_server.fresh_database() as url, postgres_server.fresh_database() as rebuilt:
        job = Job(2, {"task": "metakill", "dir": str(tmp_path), "root": str(data), "url": url}, tmp_path / "log",
                  worker=HERE / "_metakill_job.py")
        engine = sa.create_engine(url)
        try:
            _until("3 committed steps", lambda: _committed(url) >= 3, job)
            with engine.connect() as con:
                con.execute(sa.text("LOCK TABLE writes IN SHARE ROW EXCLUSIVE MODE"))  # commits of writes wait
                committed = int(con.execute(sa.text("SELECT count(*) FROM writes")).scalar_one())
                # the dump in flight appends its record (synced), then waits for the lock: kill it there
                _until("a dump recorded in the meta-file and not committed",
                       lambda: _dumps_recorded(data) == committed + 1, job)
                job.kill_all()
                job.wait(LIMIT)
                con.rollback()
        finally:
            job.cleanup()
            job.remove_leftovers()  # the shared-memory segments the killed ranks could not unlink
            engine.dispose()
        assert _check_rows(url, data) == list(range(committed))  # the original: every committed step, not the last
        report = rebuild(data, rebuilt)
        assert (len(report.added), report.writes) == (1, committed + 1)
        assert _check_rows(rebuilt, data) == list(range(committed + 1))  # the meta-file's extra dump, whole
