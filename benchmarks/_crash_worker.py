"""The MPI job that ``benchmarks/crash.py`` kills and ``tests/integration/test_concurrency.py`` races.

Run under mpiexec, one JSON argument::

    mpiexec -n 2 python benchmarks/_crash_worker.py '{"task": "crash", ...}'

Tasks
    ``crash``     mode "w": a new run, group ``g`` (datasets ``a`` <f8 and ``b`` <i4) at the given
                  level, both compressed with ``compression`` (a codec text such as
                  ``"zstd:1:shuffle"``; absent or null: raw bytes), then a loop of ``write``,
                  ``write_step`` or overwrites until killed (or ``max_steps``/``max_rounds``);
    ``continue``  mode "a" on that run (the group's compression, if any, comes from the catalog):
                  two new steps, two overwrites of committed steps, and a read-back
                  (``verify=True``) of everything written here, compared with numpy;
    ``start``     mode "w" at a signal (``go`` file) shared by several jobs: a new run, group,
                  one step; prints the run id;
    ``append``    mode "a" on a given run at the same signal: distinct steps of the same group;
    ``populate``  the fixture of the maintenance kinds: runs of groups ``g1``, ``g2``, ``g3``
                  (levels 1-3, datasets ``a`` and ``b``), each written step by step and closed;
                  With ``"nonblocking": true`` the loop's calls pass ``wait=False``, up to
                  ``outstanding`` (default 3) dumps queued between calls (:class:`Pending`);
    ``truncate``  mode "w": a new run of group ``g`` at the given level, ``steps`` steps, then
                  ``session.truncate`` after each of ``cuts`` in turn until killed;
    ``retruncate`` mode "a" on that run: ``session.truncate(cut)`` again, then a read-back
                  (``verify=True``) of every step left, compared with numpy.

The data is a pure function of (dataset index, step, version): :func:`expected`.  Every value
of every array ever written is distinct, so a row's bytes name the (dataset, step, version)
they belong to, and a zero-filled hole matches nothing.

Progress, written by rank 0 straight to ``<dir>/progress.<task>`` with one ``os.write`` per line
(no buffering, so a kill -9 loses nothing already reported):

    ``run R``                    the run id
    ``ready``                    set-up done; the loop that is killed starts now
    ``intent D S V CALL``        about to write version V of dataset D at step S (before the call)
    ``done D S V CALL``          the call returned (so its catalog commit happened); a nonblocking
                                 call: its handle's ``wait()`` returned
    ``outstanding K``            after a nonblocking call: K dumps issued and not ended
    ``cutting K`` / ``cut K``    before / after ``session.truncate(K)`` (tasks ``truncate``, ``retruncate``)
    ``truncated``                every cut done (task ``truncate``; the session then closes)
    ``populated R I``            run R (fixture index I) written and closed (task ``populate``)
    ``finished``                 the job ended normally
    ``error CLASS MESSAGE``      an SDM error ended the task (``append``/``start``/``continue``)

Every rank writes its pid to ``<dir>/pid.<task>.<rank>`` first.  The worker installs no signal
handlers; it only imports what the public API offers.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

#: The datasets of group ``g``: (name, dtype, global shape); index = position in this tuple.
DATASETS = (("a", "<f8", (64, 48)), ("b", "<i4", (30, 50)))
STEP_SPAN = 1024  # steps are < STEP_SPAN
VERSION_SPAN = 256  # versions are < VERSION_SPAN
GROUP = "g"
APP = "crashtest"


def expected(dataset: int, step: int, version: int) -> np.ndarray:
    """The global array of dataset index *dataset* at *step*, version *version* (0 = first write).

    Values ``base + i + 1`` with ``base = ((dataset*STEP_SPAN + step)*VERSION_SPAN + version)*n``:
    distinct across every element, step, version and dataset, never 0, exact in the dtype.
    """
    if not (0 <= step < STEP_SPAN and 0 <= version < VERSION_SPAN):
        raise ValueError(f"step {step} / version {version} outside the encodable range")
    _, dtype, shape = DATASETS[dataset]
    n = int(np.prod(shape))
    base = ((dataset * STEP_SPAN + step) * VERSION_SPAN + version) * n
    return (np.arange(n, dtype=np.int64) + (base + 1)).astype(dtype).reshape(shape)


def dataset_index(name: str) -> int:
    return [d[0] for d in DATASETS].index(name)


#: The groups of a fixture run (task ``populate``): name -> organization level.
FIXTURE_GROUPS = {"g1": 1, "g2": 2, "g3": 3}


def fixture_version(index: int, group: str) -> int:
    """The version :func:`expected` gives the data of group *group* of fixture run *index*
    (distinct for every run and group, so a row's bytes name the run and group they belong to)."""
    version = 3 * index + FIXTURE_GROUPS[group] - 1
    if not 0 <= version < VERSION_SPAN:
        raise ValueError(f"fixture run index {index} outside the encodable range")
    return version


class Progress:
    """Rank 0's progress file (unbuffered lines); no-op on other ranks."""

    def __init__(self, directory: Path, task: str, rank: int) -> None:
        self.fd = os.open(directory / f"progress.{task}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) \
            if rank == 0 else None

    def say(self, *words: object) -> None:
        if self.fd is not None:
            os.write(self.fd, (" ".join(str(w) for w in words) + "\n").encode())


class Events:
    """One rank's own record of what an exception interrupted (task ``crash`` with ``"events": true``):
    ``<dir>/events.<rank>``, one unbuffered line per event; a no-op otherwise."""

    def __init__(self, directory: Path, rank: int, on: bool) -> None:
        self.fd = os.open(directory / f"events.{rank}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if on else None

    def say(self, *words: object) -> None:
        if self.fd is not None:
            os.write(self.fd, (" ".join(str(w) for w in words) + "\n").encode())


#: The call in progress on this rank (``write step 5``), or ``between calls``: what :class:`Events` reports.
NOW = ["set-up"]


def _local(group, name: str, global_array: np.ndarray) -> np.ndarray:
    piece = group.piece(name)
    return np.ascontiguousarray(global_array[np.ix_(*piece.indices)]) if global_array.ndim else global_array


class Pending:
    """The nonblocking dumps of task ``crash`` with ``"nonblocking": true`` not yet reported ``done``.

    Each call is issued with ``wait=False``; the caller's arrays are overwritten with ``-1`` (a value
    :func:`expected` never gives) right after it, so a dump that did not copy them commits bytes that match
    no version.  A dump is reported ``done`` once its handle's ``wait()`` returned (its catalog commit
    happened): at once for those already ended, and the oldest waited for while more than *most* are
    outstanding.  After each call rank 0 reports ``outstanding K``: the dumps issued whose handles had not
    ended (``done()`` False) just after the call, before any wait.
    """

    def __init__(self, progress: Progress, most: int) -> None:
        from collections import deque

        self.progress, self.most = progress, max(1, int(most))
        self.queue: deque = deque()  # (handle, [(dataset index, step, version, call)]), in issue order
        self.peak = 0

    def add(self, handle, said: list[tuple[int, int, int, str]]) -> None:
        self.queue.append((handle, said))
        running = sum(1 for h, _ in self.queue if not h.done())
        self.peak = max(self.peak, running)
        self.progress.say("outstanding", running)
        while self.queue and (self.queue[0][0].done() or len(self.queue) > self.most):
            self._retire()

    def _retire(self) -> None:
        handle, said = self.queue.popleft()
        NOW[0] = f"wait for {handle.call}"
        handle.wait()  # raises the dump's error (then its intents stay without done)
        NOW[0] = "between calls"
        for words in said:
            self.progress.say("done", *words)

    def drain(self) -> None:
        while self.queue:
            self._retire()


def _write(group, progress: Progress, call: str, step: int, version: int, names: list[str], *,
           overwrite: bool = False, pending: Pending | None = None) -> None:
    """One SDM call writing *names* at *step* (``write`` one name, or ``write_step``), logged; with *pending*,
    nonblocking (``wait=False``: ``done`` is reported by *pending* once the dump's handle was waited for)."""
    for n in names:
        progress.say("intent", dataset_index(n), step, version, call)
    arrays = {n: _local(group, n, expected(dataset_index(n), step, version)) for n in names}
    NOW[0] = f"{call} step {step}"
    wait = pending is None
    if call == "write":
        (n,) = names
        handle = group.write(n, step, arrays[n], overwrite=overwrite, wait=wait)
    else:
        handle = group.write_step(step, arrays, overwrite=overwrite, wait=wait)
    NOW[0] = "between calls"
    said = [(dataset_index(n), step, version, call) for n in names]
    if pending is None:
        for words in said:
            progress.say("done", *words)
        return
    if handle is None:
        raise AssertionError(f"{call} step {step} with wait=False returned no handle")
    for a in arrays.values():  # the dump holds its own copy: this must not reach the file
        a[...] = -1
    pending.add(handle, said)


def _open(sdm, cfg: dict, mode: str, **kw):
    return sdm.open(cfg.get("app", APP), mode, root=cfg["root"], catalog=cfg["catalog"], **kw)


def _make_group(session, level: int, name: str = GROUP, compression: str | None = None):
    """Group *name* of :data:`DATASETS` at *level*; both datasets compressed with the codec text *compression*
    (``"zstd:1:shuffle"``; None: raw bytes)."""
    import sdm

    return session.make_group(name, [sdm.Dataset(n, shape=s, dtype=t) for n, t, s in DATASETS], level=level,
                              compression=compression)


def crash(cfg: dict, progress: Progress, rank: int = 0) -> None:
    """Task ``crash``: the loop that gets killed (or interrupted: with ``"events"``, each rank records
    ``raised CLASS in CALL`` when an exception reaches its loop, before the session's close runs, and
    ``left CLASS`` or ``closed`` once that close has ended)."""
    import sdm

    names = [d[0] for d in DATASETS]
    events = Events(Path(cfg["dir"]), rank, bool(cfg.get("events")))
    try:
        with _open(sdm, cfg, "w", attributes={"trial": int(cfg.get("trial", 0))}) as s:
            try:
                _loop(cfg, progress, s, names)
            except BaseException as exc:
                events.say("raised", type(exc).__name__, "in", NOW[0])
                raise
        events.say("closed")
    except BaseException as exc:
        events.say("left", type(exc).__name__)
        raise
    progress.say("finished")


def _loop(cfg: dict, progress: Progress, s, names: list[str]) -> None:
    progress.say("run", s.run_id)
    g = _make_group(s, int(cfg["level"]), compression=cfg.get("compression") or None)
    op = cfg["op"]
    if op == "overwrite":
        for step in range(int(cfg["overwrite_steps"])):
            _write(g, progress, "write_step", step, 0, names)
    progress.say("ready")
    pending = Pending(progress, int(cfg.get("outstanding", 3))) if cfg.get("nonblocking") else None
    kw = dict(pending=pending)
    if op == "write":
        for step in range(int(cfg["max_steps"])):
            for n in names:
                _write(g, progress, "write", step, 0, [n], **kw)
    elif op == "write_step":
        for step in range(int(cfg["max_steps"])):
            _write(g, progress, "write_step", step, 0, names, **kw)
    elif op == "overwrite":
        # rounds alternate write(..., overwrite=True) per dataset and write_step(..., overwrite=True)
        for version in range(1, int(cfg["max_rounds"]) + 1):
            for step in range(int(cfg["overwrite_steps"])):
                if version % 2:
                    for n in names:
                        _write(g, progress, "write", step, version, [n], overwrite=True, **kw)
                else:
                    _write(g, progress, "write_step", step, version, names, overwrite=True, **kw)
    else:
        raise ValueError(f"unknown op {op!r}")
    if pending is not None:
        pending.drain()


def continue_run(cfg: dict, progress: Progress) -> None:
    """Task ``continue``: reopen the killed run, add two steps, overwrite two, read them back."""
    import sdm

    names = [d[0] for d in DATASETS]
    version = int(cfg["version"])  # larger than every version the killed job tried
    written: list[tuple[str, int, int]] = []
    with _open(sdm, cfg, "a", run=int(cfg["run"])) as s:
        progress.say("run", s.run_id)
        g = s.group(GROUP)
        if "compression" in cfg:  # the catalog must give back the killed job's codec (None: raw bytes)
            for n in names:
                got = g.dataset(n).compression
                if got != (cfg["compression"] or None):
                    raise AssertionError(f"dataset {n} reopened with compression {got!r}, "
                                         f"written with {cfg['compression']!r}")
        committed = {n: set(g.steps(n)) for n in names}
        both = sorted(committed[names[0]] & committed[names[1]])
        start = max([max(c) for c in committed.values() if c], default=-1) + 1
        progress.say("ready")
        for step in (start, start + 1):
            _write(g, progress, "write_step", step, 0, names)
            written += [(n, step, 0) for n in names]
        if both:  # overwrite the first committed step with write_step, dataset a of the last with write
            _write(g, progress, "write_step", both[0], version, names, overwrite=True)
            written += [(n, both[0], version) for n in names]
            _write(g, progress, "write", both[-1], version + 1, [names[0]], overwrite=True)
            written = [w for w in written if not (w[0] == names[0] and w[1] == both[-1])]
            written.append((names[0], both[-1], version + 1))
        for n, step, v in written:
            got = g.read(n, step, verify=True)
            want = _local(g, n, expected(dataset_index(n), step, v))
            if not np.array_equal(got, want):
                raise AssertionError(f"read back {n} step {step} version {v}: different values")
    progress.say("finished")


def populate(cfg: dict, progress: Progress) -> None:
    """Task ``populate``: ``len(cfg["runs"])`` closed runs, run *i* with ``cfg["runs"][i]`` steps of every
    fixture group (:data:`FIXTURE_GROUPS`), the data :func:`expected` at :func:`fixture_version`."""
    import sdm

    for index, steps in enumerate(cfg["runs"]):
        with _open(sdm, cfg, "w", attributes={"index": index}) as s:
            groups = {name: _make_group(s, level, name) for name, level in FIXTURE_GROUPS.items()}
            for step in range(int(steps)):
                for name, g in groups.items():
                    version = fixture_version(index, name)
                    g.write_step(step, {n: _local(g, n, expected(dataset_index(n), step, version))
                                        for n, _, _ in DATASETS})
            run_id = s.run_id
        progress.say("populated", run_id, index)
    progress.say("finished")


def truncate(cfg: dict, progress: Progress) -> None:
    """Task ``truncate``: ``cfg["steps"]`` steps of group ``g``, then ``session.truncate`` after each of
    ``cfg["cuts"]`` (decreasing) until killed."""
    import sdm

    names = [d[0] for d in DATASETS]
    with _open(sdm, cfg, "w", attributes={"trial": int(cfg.get("trial", 0))}) as s:
        progress.say("run", s.run_id)
        g = _make_group(s, int(cfg["level"]))
        for step in range(int(cfg["steps"])):
            _write(g, progress, "write_step", step, 0, names)
        progress.say("ready")
        for cut in cfg["cuts"]:
            progress.say("cutting", int(cut))
            s.truncate(int(cut))
            progress.say("cut", int(cut))
        progress.say("truncated")
    progress.say("finished")


def retruncate(cfg: dict, progress: Progress) -> None:
    """Task ``retruncate``: the interrupted ``session.truncate(cfg["cut"])`` once more on the killed run, then
    every step left read back with ``verify=True`` and compared with numpy."""
    import sdm

    cut = int(cfg["cut"])
    with _open(sdm, cfg, "a", run=int(cfg["run"])) as s:
        progress.say("run", s.run_id)
        progress.say("ready")
        progress.say("cutting", cut)
        s.truncate(cut)
        progress.say("cut", cut)
        g = s.group(GROUP)
        for n, _, _ in DATASETS:
            for step in g.steps(n):
                got = g.read(n, step, verify=True)
                if not np.array_equal(got, _local(g, n, expected(dataset_index(n), step, 0))):
                    raise AssertionError(f"read back {n} step {step} after the truncation: different values")
    progress.say("finished")


def _wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path} after {timeout} s")
        time.sleep(0.005)


def start(cfg: dict, progress: Progress, comm) -> None:
    """Task ``start``: everybody opens mode "w" on the same fresh catalog at once."""
    import sdm

    comm.Barrier()
    if comm.Get_rank() == 0:
        progress.say("waiting")
        _wait_for(Path(cfg["go"]), float(cfg.get("go_timeout", 60)))
    comm.Barrier()
    with _open(sdm, cfg, "w", attributes={"job": int(cfg["job"])}) as s:
        progress.say("run", s.run_id)
        g = _make_group(s, int(cfg["level"]))
        _write(g, progress, "write_step", 0, 0, [d[0] for d in DATASETS])
    progress.say("finished")


def append(cfg: dict, progress: Progress, comm) -> None:
    """Task ``append``: several jobs add their own steps to one group of one run at once."""
    import sdm

    names = [d[0] for d in DATASETS]
    comm.Barrier()
    if comm.Get_rank() == 0:
        progress.say("waiting")
        _wait_for(Path(cfg["go"]), float(cfg.get("go_timeout", 60)))
    comm.Barrier()
    with _open(sdm, cfg, "a", run=int(cfg["run"])) as s:
        progress.say("run", s.run_id)
        g = s.group(GROUP)
        for k, step in enumerate(cfg["steps"]):
            if k % 3 == 2:  # mix the two calls
                for n in names:
                    _write(g, progress, "write", step, 0, [n])
            else:
                _write(g, progress, "write_step", step, 0, names)
    progress.say("finished")


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[1])
    directory = Path(cfg["dir"])
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    task = cfg["task"]
    pid_file = directory / f"pid.{task}.{rank}"
    tmp = pid_file.with_suffix(pid_file.suffix + ".tmp")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, pid_file)
    progress = Progress(directory, task, rank)
    try:
        if task == "crash":
            crash(cfg, progress, rank)
        elif task == "continue":
            continue_run(cfg, progress)
        elif task == "start":
            start(cfg, progress, comm)
        elif task == "append":
            append(cfg, progress, comm)
        elif task == "populate":
            populate(cfg, progress)
        elif task == "truncate":
            truncate(cfg, progress)
        elif task == "retruncate":
            retruncate(cfg, progress)
        else:
            raise ValueError(f"unknown task {task!r}")
    except Exception as exc:  # reported, and the exit status says it failed
        import sdm

        kind = "sdm" if isinstance(exc, sdm.SDMError) else "raw"
        progress.say("error", kind, type(exc).__name__, " ".join(str(exc).split())[:500])
        print(f"rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
