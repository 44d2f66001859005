"""Start, watch and kill mpiexec jobs from a serial driver, never hanging and leaving nothing behind.

Used by ``benchmarks/crash.py`` and ``tests/integration/test_concurrency.py``.

* ``mpiexec`` and ``python`` come from the directory of ``sys.executable`` (the project's
  virtual environment, where the ``mpich`` wheel puts ``mpiexec``), else from ``PATH``.
* The worker sees the repository's ``src`` first on ``PYTHONPATH``, so it runs the sources
  of this checkout whether or not the package is installed.
* Every job starts in a new session (``start_new_session=True``).  Hydra's proxy and every
  rank start their own sessions too, so killing the job means killing, by pid, mpiexec,
  its proxy and the ranks (the pids the ranks report, checked against ``/proc`` so that a
  recycled pid is never hit).  :meth:`Job.cleanup` does this unconditionally.
* Each job's ``TMPDIR`` is its own directory, so what mpiexec leaves there when it is killed
  goes with the job's clean-up; the topology files Hydra's processes write to ``/tmp``
  itself, and the shared-memory segments (``/dev/shm/mpich_shm_*``) that killed ranks
  cannot unlink, are removed by :meth:`Job.remove_leftovers` after the job.
* Nothing here installs a signal handler.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["REPO", "WORKER", "mpiexec", "worker_env", "run_job", "Job"]

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().parent / "_crash_worker.py"


def mpiexec() -> str:
    """The mpiexec beside the running Python (a venv's ``mpich`` wheel), else the one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError(f"no mpiexec beside {sys.executable} nor on PATH")
    return found


def worker_env() -> dict[str, str]:
    """Environment of a worker: this checkout's ``src`` first on PYTHONPATH; SDM defaults."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDM_")}
    src = str(REPO / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_job(command: list[str], env: dict[str, str], limit: float) -> str:
    """Run *command* (an ``mpiexec`` job) in its own session and return its last stdout line.

    Killed with its whole process group after *limit* seconds; a failure or a timeout ends
    the driver with a message naming the command and the end of its stderr.
    """
    proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise SystemExit(f"{' '.join(command[:8])} ... did not finish within {limit} s") from None
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command[:8])} ... failed:\n{err[-3000:]}")
    return out.strip().splitlines()[-1]


def _hydra_files() -> set[str]:
    """Hydra's hwloc topology files in the system temporary directory."""
    return set(glob.glob(os.path.join("/tmp", "hydra_hwloc_xmlfile_*")))


def _shm_files() -> set[str]:
    """MPICH's shared-memory segments; a rank killed with SIGKILL leaves its job's behind."""
    return set(glob.glob(os.path.join("/dev/shm", "mpich_shm_*")))


def _mapped(paths: set[str]) -> set[str]:
    """Those of *paths* that a live process has mapped (another job's segments in use)."""
    found: set[str] = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            text = Path(maps).read_text(errors="replace")
        except OSError:  # the process ended meanwhile
            continue
        found.update(p for p in paths if p in text)
    return found


def _children() -> dict[int, list[int]]:
    """ppid -> pids of every process we can see (from /proc)."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().decode(errors="replace")
    except OSError:
        return False
    return state[state.rindex(")") + 2:].split()[0] != "Z"


class Job:
    """One ``mpiexec -n N python <worker> <json>`` run, in its own session.

    Parameters
    ----------
    nprocs : int
    cfg : dict
        The worker's configuration; ``cfg["dir"]`` is where it reports pids and progress.
    log : Path
        File receiving the job's stdout and stderr.
    worker : Path
        The Python script each rank runs.
    mpi : bool
        False: one plain ``python <worker> <json>`` process, no mpiexec (a serial command,
        killed and cleaned up the same way; *nprocs* must be 1).
    env : dict, optional
        Variables added to the worker's environment (:func:`worker_env`).
    """

    def __init__(self, nprocs: int, cfg: dict[str, Any], log: Path, worker: Path = WORKER, *, mpi: bool = True,
                 env: dict[str, str] | None = None) -> None:
        if not mpi and nprocs != 1:
            raise ValueError(f"a job without mpiexec has one process, not {nprocs}")
        self.nprocs = nprocs
        self.cfg = cfg
        self.task = cfg["task"]
        self.dir = Path(cfg["dir"])
        self.log = log
        self.marker = str(worker)
        self._hydra_before = _hydra_files()
        self._shm_before = _shm_files()
        cmd = [sys.executable, str(worker), json.dumps(cfg)]
        if mpi:
            cmd = [mpiexec(), "-n", str(nprocs), *cmd]
        self._out = open(log, "ab")
        env = {**worker_env(), **(env or {})}
        env["TMPDIR"] = str(self.dir)  # Hydra's topology file too: a killed mpiexec cannot remove it itself
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._out, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True, cwd=self.dir)
        self.started = time.monotonic()
        self.known: set[int] = set()  # every pid of the job seen so far (mpiexec's descendants)

    # ----------------------------------------------------------------- watching
    def progress(self) -> list[str]:
        """Lines of rank 0's progress file (complete lines only)."""
        path = self.dir / f"progress.{self.task}"
        try:
            text = path.read_text()
        except OSError:
            return []
        return text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]

    def rank_pids(self) -> dict[int, int]:
        """rank -> pid, from the files the ranks wrote."""
        out = {}
        for r in range(self.nprocs):
            try:
                out[r] = int((self.dir / f"pid.{self.task}.{r}").read_text())
            except (OSError, ValueError):
                pass
        return out

    def _ours(self, pid: int) -> bool:
        """Whether *pid* is (still) a process of this job: mpiexec, its proxy or a worker rank."""
        if pid == self.proc.pid:
            return self.proc.poll() is None
        cmd = _cmdline(pid)
        return _alive(pid) and (self.marker in cmd or "hydra_pmi_proxy" in cmd)

    def scan(self) -> set[int]:
        """Remember every live descendant of mpiexec (proxy and ranks) and return them."""
        if self.proc.poll() is None:
            tree, todo = _children(), [self.proc.pid]
            while todo:
                for child in tree.get(todo.pop(), []):
                    if child not in self.known:
                        self.known.add(child)
                    todo.append(child)
        self.known.update(p for p in self.rank_pids().values())
        return {p for p in self.known if self._ours(p)}

    def wait_for(self, word: str, timeout: float) -> bool:
        """Wait until the progress file has a line starting with *word*; False on exit or timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.split(" ", 1)[0] == word for line in self.progress()):
                self.scan()
                return True
            if self.proc.poll() is not None:
                return any(line.split(" ", 1)[0] == word for line in self.progress())
            time.sleep(0.005)
        return False

    def wait(self, timeout: float) -> int | None:
        """Exit status of mpiexec, or None if it is still running after *timeout* seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    # ------------------------------------------------------------------ killing
    def kill_rank(self, rank: int) -> int:
        """SIGKILL one rank; returns its pid."""
        pid = self.rank_pids()[rank]
        if self._ours(pid):
            os.kill(pid, signal.SIGKILL)
        return pid

    def interrupt(self) -> bool:
        """Send SIGINT to mpiexec alone (what Ctrl-C in its terminal does to it; the ranks get what
        mpiexec forwards); False when mpiexec had already ended."""
        if self.proc.poll() is not None:
            return False
        os.kill(self.proc.pid, signal.SIGINT)
        return True

    def kill_all(self) -> None:
        """SIGKILL the whole job at once: every rank, the proxy and mpiexec's process group."""
        self.scan()
        ranks = [p for p in self.rank_pids().values() if self._ours(p)]
        others = [p for p in self.known if p not in ranks and self._ours(p)]
        for pid in ranks + others:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def cleanup(self, grace: float = 0.0) -> int | None:
        """Give the job *grace* seconds to end by itself, then kill whatever is left; returns the status."""
        status = self.wait(grace) if grace > 0 else self.proc.poll()
        self.scan()
        if status is None or any(self._ours(p) for p in self.known):
            self.kill_all()
            status = self.wait(10)
            deadline = time.monotonic() + 10
            while any(self._ours(p) for p in self.known) and time.monotonic() < deadline:
                time.sleep(0.01)
        self._out.close()
        return self.proc.returncode

    def remove_leftovers(self) -> list[str]:
        """Remove what this job's killed processes could not: the topology files Hydra wrote
        to the system temporary directory (not ``TMPDIR``) and the MPICH shared-memory
        segments in ``/dev/shm`` that appeared during the job and no live process maps.
        Returns their paths.

        Only for a driver that runs one job at a time (files that appeared meanwhile are
        this job's); call it once the job has ended.
        """
        hydra = _hydra_files() - self._hydra_before
        shm = _shm_files() - self._shm_before
        gone = sorted(hydra | (shm - _mapped(shm)))
        for path in gone:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return gone

    def output(self, limit: int = 2000) -> str:
        """The end of the job's output."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return text[-limit:]
