"""Plumbing for tests that run on several MPI ranks at once.

Run as (``make test`` does this for 1, 2, 3, 4 and 8 ranks)::

    .venv/bin/mpiexec -n 4 .venv/bin/python -m pytest tests/mpi -q -p no:cacheprovider

Every rank runs its own pytest over the same tests in the same order; a test body is
therefore SPMD code, and every collective it calls is called by every rank.

Fixtures
    ``comm``     ``MPI.COMM_WORLD``.
    ``mpi_tmp``  one temporary directory shared by all ranks (made by rank 0, its path
                 broadcast; removed by rank 0 after a barrier). Its parent is ``$SDM_MPI_TMPDIR``
                 (set it to a shared file system for multi-node runs), else the system temp dir.

Output
    Only rank 0 prints pytest's progress and summary. Ranks > 0 report into a buffer that
    is thrown away; instead, the report of every test that failed on a rank > 0 is sent to
    rank 0, which prints it (each line prefixed ``[rank N]``) under "failures on other
    ranks" before its own summary (one line per rank where rank 0 failed the test too).
    A rank that waits more than 5 s for the others after a test says so on its stderr,
    with its own failure report if it has one, so a run that is then killed still shows
    which test hung and why.

Failures stay in step
    After each test, all ranks compare outcomes (on a private communicator, so this never
    matches a collective of the code under test). A test that failed on any rank is failed
    on every rank: where it passed locally, an error is added at teardown naming the ranks
    it failed on. So each rank's pytest counts it, ``-x`` stops every rank at the same test,
    and every rank exits with the same status.

Nothing hangs (timeouts)
    Every test is under pytest-timeout (``timeout`` in pyproject.toml, 120 s; change one test
    with ``@pytest.mark.timeout(seconds)``). For tests here the timer is replaced by one that
    suits MPI:

    1. at the deadline SIGALRM fails the test the ordinary way, which works while the rank
       runs Python code (the other ranks get the same treatment at their deadline);
    2. a rank blocked inside an MPI call (a collective some other rank never joins) cannot run
       Python signal handlers, so ``$SDM_MPI_ABORT_GRACE`` seconds (10) later a watchdog
       thread prints the test name, its captured output and all Python stacks of that rank
       to stderr and calls ``MPI_Abort``, which ends every rank: the run fails, loudly, but
       never hangs;
    2b. some blocking mpi4py calls (the pickle-based lower-case collectives such as
       ``comm.allreduce``) keep the GIL, so that thread cannot run either; another grace
       period later faulthandler's C-level timer prints the Python stacks ("Timeout (h:mm:ss)!")
       and exits the rank, and mpiexec then ends the others;
    3. every wait of this plumbing for the other ranks (the per-test comparison, the
       ``mpi_tmp`` barrier, the collection check) polls a non-blocking collective under a
       deadline (test timeout + grace + 30 s) and aborts the same way when it expires.

    ``make test`` also runs each ``mpiexec`` under ``timeout`` as a last resort.

Also checked: all ranks must collect the same tests in the same order (a rank-dependent
``skipif`` at collection would desynchronise them); otherwise every rank stops with a usage
error before running anything. Skip decisions inside tests must also be the same on all
ranks.
"""

from __future__ import annotations

import faulthandler
import hashlib
import io
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest
from mpi4py import MPI

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()
MPI_DIR = Path(__file__).resolve().parent

ABORT_GRACE = float(os.environ.get("SDM_MPI_ABORT_GRACE", "10"))
DEFAULT_SYNC_TIMEOUT = 300.0  # waits for other ranks when a test has no timeout
SYNC_MARGIN = 30.0
NOTE_AFTER = 5.0  # seconds a rank waits for the others before saying so on stderr

_state: dict = {
    "sync": None,          # private communicator for the per-test comparison
    "tmp": None,           # private communicator for mpi_tmp
    "stderr": None,        # this rank's real stderr, for messages while output is captured
    "remote_reports": [],  # (rank, text) of failures on ranks > 0, gathered on rank 0
    "my_failures": [],     # this rank's failure texts (ranks > 0 send them to rank 0)
}
_TIMEOUT_KEY = pytest.StashKey[float]()
_FAILED_KEY = pytest.StashKey[list]()


# --------------------------------------------------------------------------- helpers


def _is_mpi_item(item: pytest.Item) -> bool:
    return SIZE > 1 or MPI_DIR in Path(str(item.path)).resolve().parents


def _say(text: str) -> None:
    """Write to this rank's real stderr, even while pytest captures output."""
    stream = _state["stderr"] or sys.__stderr__
    stream.write(text if text.endswith("\n") else text + "\n")
    stream.flush()


def _abort(reason: str, item: pytest.Item | None = None) -> None:
    """Print why, this rank's captured output and Python stacks, then MPI_Abort all ranks."""
    try:
        _say(f"\n{'+' * 20} [rank {RANK} of {SIZE}] {reason}; aborting all ranks {'+' * 20}")
        if item is not None:
            capman = item.config.pluginmanager.getplugin("capturemanager")
            if capman is not None:
                capman.suspend_global_capture(in_=True)
                out, err = capman.read_global_capture()
                if out:
                    _say(f"---- captured stdout of rank {RANK} ----\n{out}")
                if err:
                    _say(f"---- captured stderr of rank {RANK} ----\n{err}")
        _say(f"---- Python stacks of rank {RANK} ----")
        faulthandler.dump_traceback(file=_state["stderr"] or sys.__stderr__, all_threads=True)
    finally:
        try:
            WORLD.Abort(1)
        finally:
            os._exit(1)


def _wait(request: MPI.Request, what: str, seconds: float, item: pytest.Item | None = None,
          note: str = "") -> None:
    """Complete a non-blocking collective, or abort all ranks after ``seconds``.

    ``note`` is printed to stderr if the wait takes more than a few seconds (so a rank that
    failed before a collective says why the others may be stuck, even if it is killed).
    """
    start = time.monotonic()
    deadline = start + seconds
    pause = 0.0
    while not request.Test():
        now = time.monotonic()
        if note and now - start > NOTE_AFTER:
            _say(note)
            note = ""
        if now > deadline:
            _abort(f"{what}: the other ranks did not arrive within {seconds:.0f} s", item)
        time.sleep(pause)
        pause = min(0.01, pause + 0.0002)


def _allgather_int(comm: MPI.Comm, value: int, what: str, seconds: float,
                   item: pytest.Item | None = None, note: str = "") -> list[int]:
    send, recv = array("q", [value]), array("q", [0] * SIZE)
    _wait(comm.Iallgather(send, recv), what, seconds, item, note)
    return list(recv)


def _bcast_text(comm: MPI.Comm, text: str | None, what: str, seconds: float) -> str:
    data = (text or "").encode() if RANK == 0 else b""
    length = array("q", [len(data)])
    _wait(comm.Ibcast(length, root=0), what, seconds)
    buf = bytearray(data) if RANK == 0 else bytearray(length[0])
    _wait(comm.Ibcast(buf, root=0), what, seconds)
    return buf.decode()


def _gather_text(comm: MPI.Comm, text: str, what: str, seconds: float) -> list[str]:
    """Gather one string per rank on rank 0 (other ranks get [])."""
    data = text.encode()
    sizes = _allgather_int(comm, len(data), what, seconds)
    recv = bytearray(sum(sizes)) if RANK == 0 else bytearray(0)
    displs = [sum(sizes[:r]) for r in range(SIZE)]
    _wait(comm.Igatherv(data, [recv, sizes, displs, MPI.BYTE] if RANK == 0 else None, root=0),
          what, seconds)
    if RANK != 0:
        return []
    return [recv[displs[r]:displs[r] + sizes[r]].decode(errors="replace") for r in range(SIZE)]


def _sync_timeout(item: pytest.Item | None) -> float:
    timeout = item.stash.get(_TIMEOUT_KEY, 0.0) if item is not None else 0.0
    return timeout + ABORT_GRACE + SYNC_MARGIN if timeout > 0 else DEFAULT_SYNC_TIMEOUT


def _format_report(report: pytest.TestReport | pytest.CollectReport, short: bool = False) -> str:
    """A failed report as text, each line prefixed with this rank."""
    when = getattr(report, "when", "collect")
    if short:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else report.longreprtext.strip()
        message = (message.splitlines() or [""])[0]
        return f"[rank {RANK}] {report.nodeid} ({when}) also failed here: {message}"
    lines = [f"{'_' * 10} {report.nodeid} ({when}) {'_' * 10}", report.longreprtext]
    for title, content in report.sections:
        lines.append(f"{'-' * 10} {title} {'-' * 10}")
        lines.append(content.rstrip("\n"))
    return "\n".join(f"[rank {RANK}] {line}" for text in lines for line in text.splitlines())


# --------------------------------------------------------------------------- set-up


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    _state["sync"] = WORLD.Dup()
    _state["tmp"] = WORLD.Dup()
    _state["stderr"] = os.fdopen(os.dup(2), "w", buffering=1, errors="replace")
    config.addinivalue_line("markers", "mpi: runs under mpiexec with several ranks")
    if RANK > 0:
        # Ranks > 0 report into a buffer nobody reads; their failures reach rank 0 instead.
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)
            config.pluginmanager.register(pytest.TerminalReporter(config, io.StringIO()),
                                          "terminalreporter")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _is_mpi_item(item):
            item.add_marker(pytest.mark.mpi)


def pytest_collection_finish(session: pytest.Session) -> None:
    listing = "\n".join(item.nodeid for item in session.items)
    digest = int.from_bytes(hashlib.sha256(listing.encode()).digest()[:7], "big")
    what = "comparing the collected tests"
    digests = _allgather_int(_state["sync"], digest, what, DEFAULT_SYNC_TIMEOUT)
    counts = _allgather_int(_state["sync"], len(session.items), what, DEFAULT_SYNC_TIMEOUT)
    errors = _allgather_int(_state["sync"], session.testsfailed, what, DEFAULT_SYNC_TIMEOUT)
    if len(set(digests)) > 1 or len(set(errors)) > 1:
        per_rank = ", ".join(f"rank {r}: {counts[r]} tests, {errors[r]} collection errors"
                             for r in range(SIZE))
        # pytest.exit reports through the terminal reporter: printed once, by rank 0.
        pytest.exit(
            f"MPI ranks collected different tests ({per_rank}). Every rank must collect the "
            "same tests in the same order: make skip/parametrize decisions independent of the "
            "rank.", returncode=pytest.ExitCode.USAGE_ERROR)


# --------------------------------------------------------------------------- timeouts


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool | None:
    """pytest-timeout hook: SIGALRM fails the test; if that cannot act, MPI_Abort."""
    if not _is_mpi_item(item):
        return None  # pytest-timeout's own timer
    timeout = float(settings.timeout)
    item.stash[_TIMEOUT_KEY] = timeout

    def on_alarm(signum, frame):
        __tracebackhide__ = True
        pytest.fail(f"Timeout: test still running after {timeout:g} s on rank {RANK} "
                    f"(a rank blocked inside MPI is aborted {ABORT_GRACE:g} s later)")

    watchdog = threading.Timer(
        timeout + ABORT_GRACE, _abort,
        (f"test {item.nodeid} still running {timeout + ABORT_GRACE:g} s after it started "
         f"(timeout {timeout:g} s; SIGALRM could not interrupt it, e.g. blocked in MPI)", item))
    watchdog.daemon = True
    watchdog.name = f"sdm-mpi-watchdog {item.nodeid}"

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        watchdog.cancel()
        faulthandler.cancel_dump_traceback_later()

    item.cancel_timeout = cancel  # pytest-timeout's cancel hook calls this
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    watchdog.start()
    # The watchdog thread needs the GIL, which some blocking mpi4py calls keep (the
    # pickle-based lower-case collectives). faulthandler's timer is a C thread that needs no
    # GIL: it prints the Python stacks and _exit(1)s this rank; mpiexec then ends the others.
    faulthandler.dump_traceback_later(timeout + 2 * ABORT_GRACE, exit=True,
                                      file=_state["stderr"] or sys.__stderr__)
    return True


# --------------------------------------------------------------------------- outcomes


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.failed:
        item.stash.setdefault(_FAILED_KEY, []).append(report)
    if report.when != "teardown":
        return
    # Every rank arrives here once per test: compare outcomes with the others.
    cancel = getattr(item, "cancel_timeout", None)
    if cancel is not None:
        cancel()  # the wait below has its own deadline
    failures = item.stash.get(_FAILED_KEY, [])
    if failures:
        note = (f"[rank {RANK}] {item.nodeid} failed here and the other ranks have not finished "
                "it yet (are they waiting in a collective this rank skipped?):\n"
                + "\n".join(_format_report(rep) for rep in failures))
    else:
        note = (f"[rank {RANK}] {item.nodeid} passed here; still waiting for other ranks "
                "to finish it")
    flags = _allgather_int(_state["sync"], int(bool(failures)),
                           f"comparing outcomes after {item.nodeid}", _sync_timeout(item), item,
                           note)
    failed_on = [r for r, flag in enumerate(flags) if flag]
    if RANK > 0:
        # Rank 0 prints these. Where rank 0 failed too, one line each is enough.
        _state["my_failures"].extend(_format_report(rep, short=bool(flags[0]))
                                     for rep in failures)
    if failed_on and not failures:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} failed on rank(s) {', '.join(map(str, failed_on))} of {SIZE}; "
            "the reports of ranks > 0 are printed by rank 0 before its summary.")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if RANK > 0 and report.failed:
        _state["my_failures"].append(_format_report(report))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Gather the failure reports of ranks > 0 on rank 0; give every rank the same status."""
    what = "gathering failure reports at the end of the session"
    texts = _gather_text(_state["sync"], "\n".join(_state["my_failures"]), what,
                         DEFAULT_SYNC_TIMEOUT)
    _state["remote_reports"] = [(r, t) for r, t in enumerate(texts) if r > 0 and t]
    statuses = _allgather_int(_state["sync"], int(session.exitstatus), what, DEFAULT_SYNC_TIMEOUT)
    for status in (3, 2, 1, 4, 5):  # internal error, interrupted, failed, usage, no tests
        if status in statuses:
            session.exitstatus = pytest.ExitCode(status)
            break


def pytest_terminal_summary(terminalreporter) -> None:
    if RANK != 0 or not _state["remote_reports"]:
        return
    terminalreporter.section("failures on other ranks", sep="=")
    for _rank, text in _state["remote_reports"]:
        terminalreporter.write_line(text)


def pytest_report_header(config: pytest.Config) -> str:
    return (f"MPI: {SIZE} rank(s); {MPI.Get_library_version().splitlines()[0].strip()}; "
            f"mpi4py {__import__('mpi4py').__version__}")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def comm() -> MPI.Intracomm:
    """MPI.COMM_WORLD."""
    return WORLD


@pytest.fixture
def mpi_tmp(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A temporary directory shared by all ranks (same path everywhere), removed afterwards."""
    seconds = _sync_timeout(request.node)
    what = "creating mpi_tmp"
    text = None
    if RANK == 0:
        try:
            text = tempfile.mkdtemp(prefix="sdm-mpi-", dir=os.environ.get("SDM_MPI_TMPDIR"))
        except OSError as exc:
            text = f"\0{exc}"
    text = _bcast_text(_state["tmp"], text, what, seconds)
    if text.startswith("\0"):
        raise RuntimeError(f"rank 0 could not create the shared temporary directory: {text[1:]}")
    path = Path(text)
    try:
        yield path
    finally:
        _wait(_state["tmp"].Ibarrier(), f"removing mpi_tmp {path}", seconds)
        if RANK == 0:
            shutil.rmtree(path, ignore_errors=True)
