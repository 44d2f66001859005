"""Several MPI jobs on one catalog at once, on SQLite and on a real PostgreSQL server.

Four jobs of two ranks each (``mpiexec -n 2 python benchmarks/_crash_worker.py``) on a
fresh catalog and one data root:

1. **start**: all four wait for one signal file, then open mode "w" at the same moment (the
   catalog's schema does not exist yet), define a level-3 group and write step 0;
2. **append**: all four wait for the signal again, then open the run of the first job with
   ``sdm.open(app, "a", run=R)`` and add their own steps (distinct per job: job j writes steps
   ``1 + 25*j ...``) to the same level-3 group, i.e. the same file, with ``write_step`` and
   ``write``.

Then, from the catalog (plain SQL on a copy of the SQLite file, or SQLAlchemy on PostgreSQL)
and the files (numpy), never through SDM's read path (``benchmarks/_crash_check.py``):

* no failed start: every job of phase 1 ended normally;
* no lost row: every (dataset, step) a job saw written (its call returned) has a row in its run;
* no overlap: no two rows of a file share a byte (``[offset, offset + nbytes)`` intervals);
* every row's bytes equal the array built with numpy for its (dataset, step) and its checksum
  is the one recomputed from those bytes;
* every appending job ends normally: space is reserved through the catalog, so concurrent
  writers to one file need not be refused.

Every mpiexec runs under a timeout and is killed (with its proxy and ranks) at the end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import _crash_check as check  # noqa: E402  (benchmarks/_crash_check.py)
import _crash_worker as worker  # noqa: E402
from _mpijob import Job  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(400)]

JOBS = 4
NPROCS = 2
STEPS = 12  # steps each appending job writes
WAIT_TIMEOUT = 90.0  # s for every job to reach the signal
RUN_TIMEOUT = 150.0  # s for all jobs of a phase, once signalled


def _race(base: Path, phase: str, cfgs: list[dict]) -> list[dict]:
    """Start one job per config, release them together, wait (bounded); returns what each did."""
    go = base / f"go.{phase}"
    jobs: list[Job] = []
    try:
        for j, cfg in enumerate(cfgs):
            d = base / f"{phase}{j}"
            d.mkdir()
            jobs.append(Job(NPROCS, dict(cfg, dir=str(d), go=str(go), go_timeout=WAIT_TIMEOUT + 30), d / "log"))
        deadline = time.monotonic() + WAIT_TIMEOUT
        for job in jobs:
            job.wait_for("waiting", max(0.1, deadline - time.monotonic()))
        go.touch()
        deadline = time.monotonic() + RUN_TIMEOUT
        for job in jobs:
            job.wait(max(0.1, deadline - time.monotonic()))
    finally:
        statuses = [job.cleanup() for job in jobs]
    out = []
    for job, status in zip(jobs, statuses):
        lines = job.progress()
        runs = [int(x.split()[1]) for x in lines if x.startswith("run ")]
        errors = [x for x in lines if x.startswith("error ")]
        out.append(dict(status=status, finished="finished" in lines, run=runs[0] if runs else None,
                        errors=errors, lines=lines, output=job.output(1500)))
    return out


def _names(index: int) -> str:
    return worker.DATASETS[index][0]


def _expected(name: str, step: int, version: int):
    return worker.expected(worker.dataset_index(name), step, version)


@pytest.fixture(scope="module", params=[
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
])
def races(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[dict]:
    """Both phases on a fresh catalog of one engine; the catalog rows and their checks."""
    base = tmp_path_factory.mktemp(f"concurrency-{request.param}")
    if request.param == "sqlite":
        yield _run_races(base, f"sqlite:///{base / 'catalog.db'}")
    else:
        server = request.getfixturevalue("postgres_server")
        with server.fresh_database() as url:
            yield _run_races(base, url)


def _run_races(base: Path, url: str) -> dict:
    common = dict(root=str(base / "data"), catalog=url)
    starts = _race(base, "start", [dict(common, task="start", job=j, level=3) for j in range(JOBS)])
    run = next((s["run"] for s in starts if s["finished"]), None)
    if run is None:  # no start survived the race: make the run alone, so the appends are still tested
        alone = _race(base, "alone", [dict(common, task="start", job=JOBS, level=3)])
        run = alone[0]["run"] if alone[0]["finished"] else None
    appends: list[dict] = []
    if run is not None:
        appends = _race(base, "append", [dict(common, task="append", run=run,
                                              steps=[1 + 25 * j + k for k in range(STEPS)]) for j in range(JOBS)])
    rows = check.load_rows(url)
    intents = check.Intents()
    for job in starts + appends:
        intents.read(job["lines"], _names)
    result = check.check(rows, intents, _expected)
    lost = []
    for phase, jobs in (("start", starts), ("append", appends)):
        for j, job in enumerate(jobs):
            have = {(r.dataset, r.step) for r in rows if r.run_id == job["run"]}
            for line in job["lines"]:
                w = line.split()
                if w[0] == "done" and (_names(int(w[1])), int(w[2])) not in have:
                    lost.append(f"{phase} job {j} (run {job['run']}): {_names(int(w[1]))} step {w[2]} returned, no row")
    return dict(url=url, run=run, starts=starts, appends=appends, rows=rows, check=result, lost=lost)


def _describe(job: dict) -> str:
    return f"exit {job['status']}, {job['errors'][-1] if job['errors'] else job['output'][-600:]!r}"


def test_every_job_starts_on_a_fresh_catalog(races):
    failed = [f"job {j}: {_describe(s)}" for j, s in enumerate(races["starts"]) if not s["finished"]]
    assert not failed, f"{len(failed)} of {JOBS} jobs failed to start at once on a fresh catalog:\n" + "\n".join(failed)
    assert len({s["run"] for s in races["starts"]}) == JOBS  # each its own run


def test_concurrent_appends_all_finish(races):
    """File space is reserved through the catalog, so concurrent appenders need not be refused."""
    assert races["run"] is not None, "no job of the start phase created a run to append to"
    unclean = [f"job {j}: {_describe(a)}" for j, a in enumerate(races["appends"]) if not a["finished"]]
    assert not unclean, "appending jobs that did not finish:\n" + "\n".join(unclean)


def test_no_returned_write_is_lost(races):
    assert not races["lost"], f"{len(races['lost'])} writes returned but have no row:\n" + "\n".join(races["lost"][:40])


def test_no_two_rows_share_bytes(races):
    overlap = set(races["check"]["overlap"])
    rows = [r for r in races["rows"] if r.id in overlap]
    lines = [f"row {r.id}: run {r.run_id} {r.path} [{r.offset}, {r.offset + r.nbytes}) {r.dataset} step {r.step}"
             for r in sorted(rows, key=lambda r: (r.path, r.offset))]
    assert not overlap, (f"{len(overlap)} of {len(races['rows'])} rows share file bytes with another row:\n"
                         + "\n".join(lines[:40]))


def test_every_row_holds_the_numpy_built_data_and_its_checksum(races):
    bad = races["check"]["bad"]
    lines = [f"row {b['id']}: {b['dataset']} step {b['step']} at {b['path']}+{b['offset']}: {b['reason']} {b['detail']}"
             for b in bad]
    assert races["check"]["rows"] > 0
    assert not bad, f"{len(bad)} of {races['check']['rows']} rows are bad:\n" + "\n".join(lines[:40])
