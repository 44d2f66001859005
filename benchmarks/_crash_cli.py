"""The serial processes of ``benchmarks/crash.py``: an ``sdm`` command that gets killed, and a reader.

Run with plain ``python`` (no mpiexec), one JSON argument::

    python benchmarks/_crash_cli.py '{"task": "cli", "dir": ..., "argv": ["rebuild", ...]}'

Tasks
    ``cli``      the ``sdm`` command line (the Typer application behind the ``sdm`` script) with
                 ``argv``, in this process: the modules it will need (``preload``) are imported
                 first, then ``ready`` is reported and the command runs, so a kill drawn after
                 ``ready`` lands in the command's work, not in Python's start-up;
    ``inspect``  ``sdm.open(app, "r", run=R)``: reports the run's ``previous_state``, then reads
                 every step of every dataset with ``verify=True`` (from whichever tier holds it)
                 and compares it with the numpy array the writer wrote.

Progress lines (rank 0's file ``<dir>/progress.<task>``, as in ``_crash_worker.py``):
``ready``, ``finished CODE SECONDS`` (``cli``: the command's exit status and its time from
``ready``), ``state S`` and ``read G D S ok|bad`` / ``checked N BAD`` (``inspect``), and
``error KIND CLASS MESSAGE`` when the task itself failed.  Nothing here installs a signal
handler.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import _crash_worker as worker  # noqa: E402


def run_cli(cfg: dict, progress: worker.Progress) -> int:
    """Task ``cli``: the ``sdm`` command *argv*, started once *preload* is imported; returns its exit status."""
    for module in cfg.get("preload", ()):
        importlib.import_module(module)
    from sdm._cli.main import app

    progress.say("ready")
    t0 = time.monotonic()
    try:
        app(args=list(cfg["argv"]), prog_name="sdm")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    progress.say("finished", code, f"{time.monotonic() - t0:.4f}")
    return code


def _version(cfg: dict, index: int | None, group: str) -> int:
    """The version the writer used for *group*: a fixture run's (by its ``index`` attribute), else 0."""
    if cfg.get("fixture"):
        if index is None:
            raise ValueError("a fixture run without its index attribute")
        return worker.fixture_version(index, group)
    return 0


def inspect(cfg: dict, progress: worker.Progress) -> int:
    """Task ``inspect``: the run's previous state, then every step read (verified) and compared."""
    import sdm

    checked = bad = 0
    with sdm.open(cfg.get("app", worker.APP), "r", catalog=cfg["catalog"], run=int(cfg["run"])) as s:
        progress.say("state", s.previous_state)
        index = s.run.attributes.get("index")
        for gname in s.groups:
            g = s.group(gname)
            version = _version(cfg, index, gname)
            for name in g.datasets:
                for step in g.steps(name):
                    got = g.read(name, step, verify=True)
                    same = np.array_equal(got, worker.expected(worker.dataset_index(name), step, version))
                    checked += 1
                    bad += not same
                    if not same:
                        progress.say("read", gname, name, step, "bad")
    progress.say("checked", checked, bad)
    progress.say("finished", 0, 0)
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[1])
    directory = Path(cfg["dir"])
    task = cfg["task"]
    pid_file = directory / f"pid.{task}.0"
    tmp = pid_file.with_suffix(pid_file.suffix + ".tmp")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, pid_file)
    progress = worker.Progress(directory, task, 0)
    try:
        if task == "cli":
            return run_cli(cfg, progress)
        if task == "inspect":
            return inspect(cfg, progress)
        raise ValueError(f"unknown task {task!r}")
    except Exception as exc:  # reported, and the exit status says it failed
        import sdm

        kind = "sdm" if isinstance(exc, sdm.SDMError) else "raw"
        progress.say("error", kind, type(exc).__name__, " ".join(str(exc).split())[:500])
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv))
