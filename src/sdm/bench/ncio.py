"""The NCIO benchmark: every I/O method against region count, size and spacing.

Ching et al. measure how the shape of a noncontiguous access -- how many contiguous
regions, how large, how far apart, contiguous or not in memory and in the file --
decides the speed of each I/O method.  :func:`run` sweeps those parameters one at a
time around a base point (:func:`sweeps`), timing every method for writes and reads,
``auto`` included, side by side: for each repeat the methods run in a new shuffled
order, each sample after untimed calls (:func:`~sdm.bench.measure.settle_calls`), and medians over
the repeats are reported.  Each point also carries the cost model's prediction for every method.  Every timed write goes to a new file (as a new time step
does); every method's first write is checked byte for byte against a numpy-built
reference, and its first read against the values written.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mpi4py import MPI

from ..planner import Planner
from .measure import data_file, pattern_access, run_method, sample_calls
from ..planner.model import METHODS, CostModel
from .patterns import Pattern

__all__ = ["Sweep", "sweeps", "run", "summarize", "goals", "configuration", "markdown", "plot", "drift",
           "SWEEP_NAMES", "GOALS"]

K, M = 1 << 10, 1 << 20
SWEEP_NAMES = ("size", "count", "spacing", "contiguity")


@dataclass(frozen=True)
class Sweep:
    """One parameter varied around the base point."""

    name: str
    varied: str
    points: tuple[Pattern, ...]


def _count_for(size: int, budget: int, most: int) -> int:
    return max(2, min(most, budget // size))


def sweeps(quick: bool = False, names: tuple[str, ...] = SWEEP_NAMES) -> list[Sweep]:
    """The default sweeps (``quick``: tiny counts, for tests and a first look).

    * size: 8 B to 4 MiB regions, interleaved in the file, about 4 MiB per rank
      (262144 regions of 8 B);
    * count: 1 to 65536 regions of 64 B;
    * spacing: 0 to 32 KiB of unwritten bytes after each of 1024 regions of 64 B;
    * contiguity: 8-byte regions, memory and file contiguous or not.
    """
    budget, most, many, spaced = (64 * K, 4096, 1024, 64) if quick else (4 * M, 262144, 65536, 1024)
    sizes = (8, 512, 32 * K, 1 * M) if quick else (8, 64, 512, 4 * K, 32 * K, 256 * K, 1 * M, 4 * M)
    counts = (1, 64, 1024) if quick else (1, 16, 256, 4096, 65536)
    spacings = (0, 64, 4 * K) if quick else (0, 64, 512, 4 * K, 32 * K)
    out = {
        "size": Sweep("size", "size", tuple(Pattern(s, _count_for(s, budget, most)) for s in sizes)),
        "count": Sweep("count", "count", tuple(Pattern(64, c) for c in counts)),
        "spacing": Sweep("spacing", "spacing", tuple(Pattern(64, spaced, g) for g in spacings)),
        "contiguity": Sweep("contiguity", "contiguity", tuple(
            Pattern(8, many, 0, mc, fc) for mc, fc in ((True, True), (False, True), (True, False), (False, False))
        )),
    }
    return [out[n] for n in names]


def _shuffled(items: list[str], seed: int) -> list[str]:
    """*items* in a pseudo-random order fixed by *seed* (the same on every rank).

    A new order each repeat, so that no method always follows the same one.
    """
    order = list(items)
    random.Random(seed).shuffle(order)
    return order


def run(
    comm: MPI.Intracomm,
    directory: str | Path,
    plan: list[Sweep],
    *,
    methods: tuple[str, ...] = METHODS,
    repeats: int = 5,
    model: CostModel | None = None,
    hints: dict[str, str] | None = None,
    progress: Callable[[str, int], None] | None = None,
    quick: bool = False,
) -> list[dict[str, Any]]:
    """Time every method (and ``auto``) at every point of *plan* (collective).

    ``auto`` is measured as a new user meets it: a new planner for every point and
    direction (nothing learnt at other points), whose first accesses -- the trials
    among the methods it shortlists, if any -- run untimed until it has decided
    (their seconds are kept as ``trial_times``); its samples are then timed like
    every other method's.

    Parameters
    ----------
    comm : MPI.Comm
    directory : str or Path
        Where the scratch files go (the storage target measured).
    plan : list of Sweep
    methods : tuple of str
        Methods to time (``auto`` is added and chooses among these).
    repeats : int
        Timed repeats per method and direction (medians are reported).
    model : CostModel, optional
        Model for the predictions and for ``auto`` (default: the uncalibrated defaults).
    hints : dict, optional
        MPI-IO / method hints for the scratch files and the methods.
    progress : callable, optional
        ``progress(text, advance)`` after each method at each point and direction (rank 0 only).
    quick : bool
        A smoke test: one warm-up call and one call per sample, whatever their length.

    Returns
    -------
    list of dict
        One row per (point, direction, method): sweep, pattern, direction, method,
        times, median, predicted, chosen (auto), verified; the same on every rank.
    """
    only = {"methods": ",".join(methods)} if set(methods) != set(METHODS) else None  # auto picks among these

    def planner() -> Planner:
        return Planner(hints=only, mpi_hints=hints, model=model or CostModel())

    names = [*methods, "auto"]
    rows: list[dict[str, Any]] = []
    done: dict[Pattern, list[dict[str, Any]]] = {}
    for sweep in plan:
        for pattern in sweep.points:
            if pattern not in done:
                tell = (lambda text: progress(f"{sweep.name}: {pattern.label} {text}", 1)) if progress else None
                done[pattern] = _point(comm, directory, pattern, names, repeats, planner, hints or {}, tell, quick)
            elif progress is not None:
                progress(f"{sweep.name}: {pattern.label}", 2 * len(names))
            rows.extend({**r, "sweep": sweep.name} for r in done[pattern])
    return rows


def steps(plan: list[Sweep], methods: tuple[str, ...]) -> int:
    """Progress steps of :func:`run` (one per method, direction and point)."""
    return sum(len(s.points) for s in plan) * 2 * (len(methods) + 1)


def _point(comm: MPI.Intracomm, directory: str | Path, pattern: Pattern, names: list[str], repeats: int,
           new_planner: Callable[[], Planner], hints: dict[str, str],
           tell: Callable[[str], None] | None, quick: bool) -> list[dict[str, Any]]:
    """All methods, writes then reads, at one pattern."""
    out = []
    with data_file(comm, directory, pattern, hints) as (data, _):
        for writing in (True, False):
            access = pattern_access(comm, pattern, writing)
            planner = new_planner()
            kwargs: dict[str, Any] = dict(data=data, planner=planner, access=access, hints=hints)
            verified, chosen, inner, settle, trial = {}, {}, {}, {}, []
            for m in names:  # warm-up, and proof that each method moves every byte right
                first, chosen[m], verified[m] = run_method(comm, directory, pattern, m, writing, 1, check=True,
                                                           **kwargs)
                more, _, _ = run_method(comm, directory, pattern, m, writing, 0 if quick else 2, **kwargs)
                if m == "auto":  # its first accesses: until the trial (if any) has decided
                    trial = first + more
                    while planner.trial(access) is not None and len(trial) < 64:
                        got, _, _ = run_method(comm, directory, pattern, m, writing, 1, **kwargs)
                        trial += got
                    more, chosen[m], _ = run_method(comm, directory, pattern, m, writing, 2, **kwargs)
                inner[m], settle[m] = sample_calls(comm, min(first + more), quick)
                if tell is not None:
                    tell(f"{'write' if writing else 'read'} {m}")
            times: dict[str, list[float]] = {m: [] for m in names}
            for rep in range(repeats):
                for m in _shuffled(names, rep + 1000 * writing):
                    got, chosen[m], _ = run_method(comm, directory, pattern, m, writing, 1, inner=inner[m],
                                                   settle=settle[m], **kwargs)
                    times[m].extend(got)
            preds = {p.method: p for p in planner.model.predict_all(access, hints)}
            for m in names:
                run_as = chosen[m]
                out.append({
                    "pattern": pattern.as_dict(), "label": pattern.label, "direction": "write" if writing else "read",
                    "method": m, "chosen": run_as, "times": times[m], "median": statistics.median(times[m]),
                    "predicted": preds[run_as].seconds, "terms": preds[run_as].top(3), "verified": verified[m],
                    "calls_per_sample": inner[m], "untimed_calls": settle[m], "nbytes": sum(access.rank_bytes),
                    "regions": sum(access.rank_regions),
                    **({"trial_times": trial, "reason": planner.choose("auto", access).reason} if m == "auto" else {}),
                })
    return out


# ------------------------------------------------------------------------ reporting
def _ms(x: float) -> str:
    return f"{x * 1e3:.3g}" if x < 10 else f"{x * 1e3:.0f}"


def _sig(x: float) -> float:
    """*x* to four significant digits (results stay small)."""
    return float(f"{x:.4g}")


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (sweep, point, direction): every method's median and prediction, the min-max spread of the
    best method and of auto, the best, auto/best, auto's decision."""
    table: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = (r["sweep"], r["label"], r["direction"])
        line = table.setdefault(key, {"sweep": r["sweep"], "label": r["label"], "pattern": r["pattern"],
                                      "direction": r["direction"], "nbytes": r["nbytes"], "median": {},
                                      "spread": {}, "predicted": {}, "verified": True})
        line["median"][r["method"]] = _sig(r["median"])
        line["spread"][r["method"]] = [_sig(min(r["times"])), _sig(max(r["times"]))]
        line["predicted"][r["method"]] = _sig(r["predicted"])
        line["verified"] &= bool(r["verified"])
        if r["method"] == "auto":
            line["auto_chose"] = r["chosen"]
            line["auto_reason"] = decision(r.get("reason", ""))
            line["trial_accesses"] = len(r.get("trial_times", ()))
    for line in table.values():
        med = {m: v for m, v in line["median"].items() if m != "auto"}
        best = min(med, key=lambda m: med[m])
        line["best"] = best
        line["spread"] = {m: line["spread"][m] for m in (best, "auto") if m in line["spread"]}  # what the tables show
        line["auto_vs_best"] = _sig(line["median"]["auto"] / med[best])
        line["chosen_vs_best"] = _sig(med[line["auto_chose"]] / med[best])
        line["posix_vs_best"] = _sig(med["posix"] / med[best]) if "posix" in med else None
    return list(table.values())


def decision(reason: str) -> str:
    """The first clause of the planner's reason (up to a ``;`` outside parentheses): what auto chose and why.

    The rest lists the other methods' predictions and the model, which a summary line holds
    already (``predicted``) and its configuration names (``model``).
    """
    depth = 0
    for i, c in enumerate(reason):
        depth += (c == "(") - (c == ")")
        if c == ";" and depth == 0:
            return reason[:i]
    return reason


def prediction_error(line: dict[str, Any], method: str) -> float:
    """Relative error of *method*'s predicted time at a summary line (predicted / median - 1)."""
    return line["predicted"][method] / line["median"][method] - 1


def points(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The summary's lines without repeats: a point shared by two sweeps counts once."""
    return list({(s["label"], s["direction"]): s for s in summary}.values())


def goals(summary: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's goals measured on *summary*: auto against the best method, point by point."""
    unique = points(summary)
    eight = [s for s in unique if s["pattern"]["size"] == 8 and s["posix_vs_best"] is not None
             and not (s["pattern"]["mem_contig"] and s["pattern"]["file_contig"])]  # else one region per rank
    errors = [abs(prediction_error(s, m)) for s in unique for m in s["median"] if m != "auto"]
    ratios = [s["auto_vs_best"] for s in unique]
    chosen = [s["chosen_vs_best"] for s in unique]
    return {
        "best_vs_posix_at_8B": {f"{s['label']} {s['direction']}": s["posix_vs_best"] for s in eight},
        "points": len(unique),
        "auto_vs_best_geomean": statistics.geometric_mean(ratios),
        "auto_vs_best_median": statistics.median(ratios),
        "auto_vs_best_worst": max(ratios),
        "chosen_vs_best_geomean": statistics.geometric_mean(chosen),
        "chosen_vs_best_worst": max(chosen),
        "auto_within_10pct": sum(r <= 1.10 for r in ratios),
        "predictions_within_25pct": sum(e <= 0.25 for e in errors),
        "predictions": len(errors),
        "median_abs_prediction_error": statistics.median(errors) if errors else None,
        "all_verified": all(s["verified"] for s in unique),
    }


#: The issue's goals for auto against the best method: (geometric mean, worst point) at most.
GOALS = {False: (1.25, 3.0), True: (1.1, None)}


def configuration(name: str, rows: list[dict[str, Any]], **facts: Any) -> dict[str, Any]:
    """One measured configuration of a report: its summary, goals and *facts* (directory, model, ...)."""
    summary = summarize(rows)
    return {"name": name, **facts, "goals": goals(summary), "summary": summary}


def met(config: dict[str, Any]) -> bool:
    """Whether *config*'s auto meets the goal of its kind (calibrated or not)."""
    geomean, worst = GOALS[bool(config["calibrated"])]
    g = config["goals"]
    return g["auto_vs_best_geomean"] <= geomean and (worst is None or g["auto_vs_best_worst"] <= worst)


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: the goals per configuration, auto/best per point, then every time."""
    meta, configs = report["meta"], report["configs"]
    methods = list(meta["methods"])
    out = [f"# NCIO benchmark\n\n{meta['nprocs']} ranks on {meta['cores']} cores ({meta['host']}, {meta['mpi']}); "
           f"SDM {meta['sdm_version']} at {meta['git_commit']}; {meta['date']}; page cache, no sync; median of "
           f"{meta['repeats']} repeats in shuffled order{' (quick sweeps)' if meta['quick'] else ''}; load average "
           f"{meta['load_before']:.1f} before, {meta['load_after']:.1f} after; {meta['seconds']:.0f} s in all.\n\n"
           "auto = the planner's choice run as its own contender: a new planner per point, timed after its first "
           "accesses (its trials, if any).  Goals: without a calibration, geometric mean of auto/best <= 1.25 and "
           "worst <= 3; with one, geometric mean <= 1.1.\n\n## auto against the best method\n\n"
           "| configuration | directory | model | points | geomean | median | worst | within 10 % | goal |\n"
           "|---|---|---|---:|---:|---:|---:|---:|---|\n"]
    for c in configs:
        g = c["goals"]
        out.append(f"| {c['name']} | {c['directory']} ({c['fs']}) | {c['model']} | {g['points']} | {g['auto_vs_best_geomean']:.3f} | "
                   f"{g['auto_vs_best_median']:.3f} | {g['auto_vs_best_worst']:.2f} | {g['auto_within_10pct']} | "
                   f"{'met' if met(c) else 'missed'} |\n")
    lines = [{(s["label"], s["direction"]): s for s in points(c["summary"])} for c in configs]
    out.append("\n## auto/best per point (the method auto kept)\n\n| point | "
               + " | ".join(c["name"] for c in configs) + " |\n|---|" + "---:|" * len(configs) + "\n")
    for key in dict.fromkeys(k for line in lines for k in line):
        cells = [f"{line[key]['auto_vs_best']:.2f} ({line[key]['auto_chose']})" if key in line else "-"
                 for line in lines]
        out.append(f"| {key[0]} {key[1]} | " + " | ".join(cells) + " |\n")
    for c in configs:
        out.append(f"\n## {c['name']}: {c['directory']} ({c['fs']}), model: {c['model']}; load average "
                   f"{c['load_before']:.1f} before, {c['load_after']:.1f} after, {c['seconds']:.0f} s\n")
        out.append(_tables(c["summary"], methods))
        out.append(_goal_lines(c["goals"]))
        if c.get("calibration_drift"):
            out.append(drift_markdown(c["calibration_drift"]))
    return "".join(out)


def _tables(summary: list[dict[str, Any]], methods: list[str]) -> str:
    """Median times (ms, min-max of the best) per sweep and direction."""
    parts = []
    cols = ["pattern", *methods, "auto (chose)", "auto/best", "posix/best", "pred/meas best", "ok"]
    for sweep in dict.fromkeys(s["sweep"] for s in summary):
        for direction in ("write", "read"):
            lines = [s for s in summary if s["sweep"] == sweep and s["direction"] == direction]
            if not lines:
                continue
            parts += [f"\n### {sweep} sweep, {direction} (ms)\n\n", "| " + " | ".join(cols) + " |\n",
                      "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|\n"]
            for s in lines:
                cells = [s["label"]]
                for m in methods:
                    v = _ms(s["median"][m])
                    cells.append(f"**{v}** ({_ms(s['spread'][m][0])}-{_ms(s['spread'][m][1])})"
                                 if m == s["best"] else v)
                cells += [f"{_ms(s['median']['auto'])} ({s['auto_chose']})", f"{s['auto_vs_best']:.2f}",
                          "-" if s["posix_vs_best"] is None else f"{s['posix_vs_best']:.0f}x",
                          f"{1 + prediction_error(s, s['best']):.2f}", "yes" if s["verified"] else "NO"]
                parts.append("| " + " | ".join(cells) + " |\n")
    return "".join(parts)


def _goal_lines(g: dict[str, Any]) -> str:
    eight = ", ".join(f"{k} {v:.0f}x" for k, v in g["best_vs_posix_at_8B"].items()) or "-"
    return (f"\n* auto against the best method: geometric mean {g['auto_vs_best_geomean']:.3f}x, median "
            f"{g['auto_vs_best_median']:.3f}x, worst {g['auto_vs_best_worst']:.2f}x over {g['points']} points, "
            f"within 10 % at {g['auto_within_10pct']}; the method auto kept, by the other methods' own samples: "
            f"geomean {g['chosen_vs_best_geomean']:.3f}x, worst {g['chosen_vs_best_worst']:.2f}x\n"
            f"* best method vs posix at 8-byte regions (contiguous in memory and file excluded): {eight}\n"
            f"* predictions within 25 % of measured: {g['predictions_within_25pct']} of {g['predictions']}, median "
            f"error {100 * (g['median_abs_prediction_error'] or 0):.0f} %\n"
            f"* every written file byte-identical to the numpy reference: {'yes' if g['all_verified'] else 'NO'}\n")


def drift_markdown(d: dict[str, Any]) -> str:
    """The goals' line for a :func:`drift` result."""
    return (f"* the calibration's {d['samples']} samples timed again after the sweep: median change "
            f"{100 * d['median_change']:.0f} %, {d['over_25pct']} of {d['samples']} moved by more than 25 % "
            f"(worst {d['worst']:.2f}x): how far the machine itself drifts while the model's inputs stay the same\n")


def drift(before: list[float], after: list[float]) -> dict[str, Any]:
    """How the same samples' times moved between two measurements (*before*, *after*: seconds, pairwise).

    ``worst`` is the largest factor either way (2.0 for a sample that took twice or half as long).
    """
    if len(before) != len(after) or not before:
        raise ValueError(f"drift needs the same samples twice, got {len(before)} and {len(after)} times")
    ratios = [a / b for b, a in zip(before, after)]
    changes = [abs(r - 1) for r in ratios]
    return {"samples": len(ratios), "median_change": statistics.median(changes),
            "over_25pct": sum(c > 0.25 for c in changes), "worst": max(max(r, 1 / r) for r in ratios)}


def plot(report: dict[str, Any], path: Path) -> None:
    """auto/best at every point, one series per configuration, with the goals' lines (a small PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = report["configs"]
    keys = list(dict.fromkeys((s["label"], s["direction"]) for c in configs for s in points(c["summary"])))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.22 * len(keys) + 2), 4.2))
    for k, c in enumerate(configs):
        ratio = {(s["label"], s["direction"]): s["auto_vs_best"] for s in points(c["summary"])}
        x = [i + (k - (len(configs) - 1) / 2) * 0.15 for i, key in enumerate(keys) if key in ratio]
        ax.plot(x, [ratio[key] for key in keys if key in ratio], "o^sD"[k % 4], ms=4, ls="none",
                label=f"{c['name']}: geomean {c['goals']['auto_vs_best_geomean']:.2f}")
    for level, text in ((1.1, "1.1"), (1.25, "1.25"), (3.0, "3")):
        ax.axhline(level, color="grey", lw=0.6, ls="--")
        ax.annotate(text, (len(keys) - 0.5, level), fontsize=6, color="grey", va="bottom", ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("auto / best method (time)")
    ax.set_xticks(range(len(keys)), [f"{label} {d[0]}" for label, d in keys], rotation=90, fontsize=5)
    ax.set_xlim(-0.5, len(keys) - 0.5)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)
    meta = report["meta"]
    ax.set_title(f"NCIO, {meta['nprocs']} ranks: auto against the best method at every point", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=60)  # small: results keep PNGs well under 150 KB
    plt.close(fig)
