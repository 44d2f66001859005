"""Many processes on one catalog at once, on SQLite and the real PostgreSQL server.

* Creating the schema: any number of jobs may open a fresh catalog at the same moment.
* Reserving file space: concurrent reservations on one file never overlap.

The processes start together behind a barrier (multiprocessing, spawn), so the races
are real; the checks are on what each process returns and on the catalog afterwards.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback

import pytest
import sqlalchemy as sa

from sdm.catalog import Catalog
from sdm.catalog import schema as S

pytestmark = pytest.mark.timeout(180)

JOBS = 4
RESERVATIONS = 40


def _open_and_reserve(url: str, barrier, job: int, queue) -> None:
    try:
        barrier.wait(timeout=60)
        cat = Catalog(url)  # every job may be the one that creates the schema
        try:
            run = cat.create_run("race", nprocs=1, root="/r")
            barrier.wait(timeout=60)
            shared = cat.run(1).id  # every job reserves in the first run's file
            got = []
            for i in range(RESERVATIONS):
                nbytes = 8 * (1 + (job * 31 + i * 17) % 97)
                (offset,) = cat.reserve(shared, [("race/f.sdm", 3, nbytes, False)])
                got.append((offset, nbytes))
            (whole,) = cat.reserve(shared, [(f"race/one.s{job % 2}.sdm", 1, 64, True)])
            queue.put((job, run, got, whole, None))
        finally:
            cat.close()
    except BaseException:  # noqa: BLE001 - reported to the test
        queue.put((job, None, None, None, traceback.format_exc()))


def _race(url: str) -> list[tuple]:
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(JOBS), ctx.Queue()
    procs = [ctx.Process(target=_open_and_reserve, args=(url, barrier, j, queue)) for j in range(JOBS)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=150) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    return sorted(results)


def test_jobs_start_at_once_on_a_fresh_catalog_and_never_share_bytes(catalog_url: str) -> None:
    results = _race(catalog_url)
    errors = [r[4] for r in results if r[4] is not None]
    assert errors == []  # 0 failed starts
    assert sorted(r[1] for r in results) == list(range(1, JOBS + 1))  # one run each, distinct ids
    spans = sorted((o, o + n) for r in results for o, n in r[2])
    assert len(spans) == JOBS * RESERVATIONS
    assert spans[0][0] == 0
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        assert a1 == b0  # back to back: no overlap, no gap
    # a level-1 path goes to exactly one job; the others are told it is taken
    wholes = [r[3] for r in results]
    assert sorted(w for w in wholes if w is not None) == [0, 0] and wholes.count(None) == JOBS - 2
    cat = Catalog(catalog_url, create=False)
    try:
        with cat.engine.connect() as con:
            assert con.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all() == ["0013"]
            assert con.execute(sa.select(sa.func.count()).select_from(S.catalog_info)).scalar_one() == 1
            end = con.execute(sa.select(S.files.c.alloc_end).where(S.files.c.path == "race/f.sdm")).scalar_one()
        assert end == spans[-1][1]
    finally:
        cat.close()
