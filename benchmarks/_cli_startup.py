"""The command-line section of ``benchmarks/startup.py``: ``sdm --help`` and ``sdm ls`` against their goals.

Each repeat runs every command once for every contender, in fresh interpreters
(``python -m sdm ...``, the wall time until it exits), the order of the contenders and
of the commands rotating from repeat to repeat, so load that comes and goes falls on all
of them alike; the load average is read before every repeat. The medians (with min-max)
of this checkout are held against :data:`GOALS`. One more run of each command of this
checkout under ``python -X importtime`` says where its start-up goes (the costliest
imports, cumulative).
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

__all__ = ["GOALS", "COMMANDS", "measure", "markdown", "plot", "host"]

#: What each command must achieve: its median wall time in seconds, this checkout, on the machine measured
GOALS = {"sdm --help": 0.2, "sdm ls": 0.3}
#: The commands measured (``sdm ls APP``: the runs of one application, not a goal of its own)
COMMANDS = {"sdm --help": ["--help"], "sdm ls": ["ls"], "sdm ls APP": ["ls", "app"]}


def host() -> dict[str, Any]:
    """The machine: its name, processor, cores, memory, operating system."""
    cpu = "unknown"
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = found.group(1).strip() if found else cpu
    except OSError:
        pass
    try:
        mem = int(re.search(r"^MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text(), re.M).group(1)) // 1024  # type: ignore[union-attr]
    except (OSError, AttributeError):
        mem = 0
    return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "memory_mib": mem,
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version()}


def _env(src: Path, extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), **extra}


def _wall(src: Path, argv: Sequence[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sdm", *argv], env=_env(src, env), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=120)
    return time.perf_counter() - start


def _imports(src: Path, argv: Sequence[str], env: dict[str, str], top: int = 10) -> list[list[Any]]:
    """The costliest imports of one run (``-X importtime``): ``[module, cumulative ms]``, outermost first."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "sdm", *argv], env=_env(src, env),
                         capture_output=True, text=True, check=True, timeout=120)
    rows = []
    for m in re.finditer(r"^import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)$", out.stderr, re.M):
        if len(m.group(2)) <= 3:  # imported by the command's modules themselves, or by those they import
            rows.append([m.group(3), int(m.group(1)) / 1e3])
    rows.sort(key=lambda r: r[1], reverse=True)
    return rows[:top]


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def measure(contenders: dict[str, Path], repeats: int, env: dict[str, str], say: Any = print) -> dict[str, Any]:
    """Every command of :data:`COMMANDS` for every contender (a ``src/`` directory), *repeats* times, interleaved.

    *env* names the catalog (``SDM_CATALOG``). Returns the samples, their statistics per
    command and contender, the load average before each repeat and the imports of this
    checkout's commands (the first contender).
    """
    names, keys = list(contenders), list(COMMANDS)
    samples: dict[str, dict[str, list[float]]] = {k: {n: [] for n in names} for k in keys}
    loads = []
    for name in names:  # once each before the clock: the file system's caches hold what every run reads
        for argv in COMMANDS.values():
            _wall(contenders[name], argv, env)
    for r in range(repeats):
        loads.append(os.getloadavg()[0])
        for name in names[r % len(names):] + names[:r % len(names)]:
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                samples[key][name].append(_wall(contenders[name], COMMANDS[key], env))
        say(f"command line: repeat {r + 1}/{repeats} done (load {loads[-1]:.2f})")
    this = names[0]
    return {"samples": samples, "table": {k: {n: _stats(v) for n, v in per.items()} for k, per in samples.items()},
            "loads": loads, "imports": {k: _imports(contenders[this], COMMANDS[k], env) for k in keys},
            "repeats": repeats}


def _s(stats: dict[str, float]) -> str:
    return f"{stats['median']:.3f} ({stats['min']:.3f}-{stats['max']:.3f})"


def verdicts(cli: dict[str, Any], this: str) -> dict[str, bool]:
    """Whether this checkout's median of each command meets its goal."""
    return {key: cli["table"][key][this]["median"] < goal for key, goal in GOALS.items()}


def markdown(cli: dict[str, Any], labels: dict[str, str], meta: dict[str, Any]) -> list[str]:
    """The section's lines: the goals met or missed, the table of seconds, the load, where the time goes."""
    names = list(labels)
    this, loads = names[0], cli["loads"]
    met = verdicts(cli, this)
    h = meta["host_facts"]
    lines = ["## The command line: `sdm --help` and `sdm ls`", "",
             f"SDM {meta['sdm_version']} at {meta['git_commit']}, {meta['cli_date']}; {h['host']}: {h['cpu']}, "
             f"{h['cores']} cores, {h['memory_mib']} MiB, {h['os']}, Python {h['python']}. Wall time of "
             f"`python -m sdm ...` in a fresh interpreter until it exits, {cli['repeats']} interleaved repeats "
             "(contenders and commands in rotating order); the catalog: SQLite, 3 runs of one application. "
             f"Load average over the repeats {min(loads):.2f}-{max(loads):.2f} (median "
             f"{statistics.median(loads):.2f}) on {h['cores']} cores shared with other work.", ""]
    lines += [f"- **{key}** under {goal:.1f} s: **{'met' if met[key] else 'missed'}** (median "
              f"{cli['table'][key][this]['median']:.3f} s, min-max {cli['table'][key][this]['min']:.3f}-"
              f"{cli['table'][key][this]['max']:.3f} s)" for key, goal in GOALS.items()]
    lines += ["", "| command | " + " | ".join(f"{labels[n]} (s)" for n in names) + " | goal |",
              "|---|" + "---|" * (len(names) + 1)]
    for key, per in cli["table"].items():
        goal = f"< {GOALS[key]:.1f} s" if key in GOALS else "-"
        lines.append(f"| {key} | " + " | ".join(_s(per[n]) for n in names) + f" | {goal} |")
    lines += ["", f"Where {labels[this]}'s start-up goes (`python -X importtime`, one run each; cumulative ms of the "
              "costliest imports):", "", "| command | imports (cumulative ms) |", "|---|---|"]
    for key, rows in cli["imports"].items():
        lines.append(f"| {key} | " + ", ".join(f"`{m}` {ms:.0f}" for m, ms in rows) + " |")
    return lines + [""]


def plot(cli: dict[str, Any], labels: dict[str, str], path: Path) -> None:
    """Median seconds of every command per contender (min-max as error bars), the goals as marks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from _plots import save_png

    names, keys = list(labels), list(cli["table"])
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
    height = 0.8 / len(names)
    for i, name in enumerate(names):
        med = [cli["table"][k][name]["median"] for k in keys]
        lo = [m - cli["table"][k][name]["min"] for k, m in zip(keys, med)]
        hi = [cli["table"][k][name]["max"] - m for k, m in zip(keys, med)]
        ax.barh([y + i * height for y in range(len(keys))], med, height, xerr=[lo, hi], capsize=3,
                label=labels[name])
    for y, key in enumerate(keys):
        if key in GOALS:
            ax.plot([GOALS[key]] * 2, [y - 0.1, y + 0.9 - height], color="black", linestyle="--", linewidth=1)
    ax.set_yticks([y + height * (len(names) - 1) / 2 for y in range(len(keys))], keys)
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median, min-max); dashed: the goal")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"sdm start-up, {cli['repeats']} interleaved repeats", fontsize=10)
    save_png(fig, path)
    plt.close(fig)
