"""Refit stored NCIO runs with the current cost model, without running any I/O.

Every ``ncio.json`` keeps the samples and direct timings of the calibration behind its
predictions.  This script recomputes each sample's cost units with the model as it is
now, fits the constants again (:func:`sdm.bench.calibrate.fit`) and predicts every
point of the run's sweep, so that a change of the model is judged against several
measured runs at once instead of one new, noisy run.

Usage::

    python benchmarks/refit.py                                         # benchmarks/results/ncio.json
    python benchmarks/refit.py benchmarks/results/ncio.json --misses   # a file, and its misses
    python benchmarks/refit.py --rev HEAD~5                            # ncio.json as committed then
    python benchmarks/refit.py --margins 0.1,0.25                      # auto's trials replayed

Prints, per run, the predictions within 25 % of measured (and, with ``--misses``, the
points outside); ``--json FILE`` saves the same figures.  ``--margins`` replays
``auto`` at every point of every run as :mod:`sdm.planner.trials` decides it with each
tie margin: the methods predicted within the margin of the fastest are tried and the
one measured fastest is kept (the runs' medians standing in for the trial's timings);
it prints at how many points that choice is more than 10 % slower than the best
method, and what the trial's accesses cost against the method kept.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from sdm.bench.calibrate import Sample, fit
from sdm.planner.model import DEFAULTS, CostModel, structure
from sdm.bench.patterns import Pattern
from sdm.planner.trials import contenders

RESULTS = "benchmarks/results/ncio.json"


def refit(run: dict[str, Any], both: bool = False) -> CostModel:
    """The model the current code fits to *run*'s stored calibration samples (with *both*, also
    to the same samples timed again after the sweep, where the run has them)."""
    nprocs, cores, romio = run["model"]["nprocs"], run["model"]["cores"], run["model"].get("romio", {})
    direct = run["calibration"]["direct"]
    blank = CostModel(nprocs=nprocs, cores=cores, romio=romio)
    samples = []
    stored = run["calibration"]["samples"] + (run["calibration"].get("after", []) if both else [])
    for s in stored:
        pattern = Pattern(**s["pattern"])
        counts = structure(s["method"], pattern.access(nprocs, s["writing"]), blank.params()).counts()
        samples.append(Sample(s["method"], pattern, s["writing"], counts, s["seconds"]))
    constants = fit(samples, known=direct)
    return CostModel(constants={**DEFAULTS, **constants, **direct}, nprocs=nprocs, cores=cores, romio=romio,
                     calibrated=True, label="refit")


def score(run: dict[str, Any], model: CostModel) -> dict[str, Any]:
    """Predicted against measured for every point and method of *run*'s sweep."""
    nprocs = run["meta"]["nprocs"]
    errors, misses = [], []
    for point in run["summary"]:
        pattern, writing = Pattern(**point["pattern"]), point["direction"] == "write"
        a = pattern.access(nprocs, writing)
        for method, measured in point["median"].items():
            if method == "auto":
                continue
            ratio = model.predict(method, a).seconds / measured
            errors.append(abs(ratio - 1))
            if abs(ratio - 1) > 0.25:
                misses.append({"point": point["label"], "direction": point["direction"], "method": method,
                               "measured_ms": measured * 1e3, "ratio": ratio})
    return {"within_25pct": sum(e <= 0.25 for e in errors), "predictions": len(errors),
            "median_error": statistics.median(errors), "misses": misses}


def replay(run: dict[str, Any], model: CostModel, margin: float) -> list[dict[str, Any]]:
    """Auto with trials at tie *margin* at every point of *run*: what it keeps and what trying cost."""
    out = []
    for point in run["summary"]:
        measured = {m: t for m, t in point["median"].items() if m != "auto"}
        a = Pattern(**point["pattern"]).access(run["meta"]["nprocs"], point["direction"] == "write")
        tried = contenders([(p.method, p.seconds) for p in model.predict_all(a, methods=tuple(measured))], margin)
        kept = min(tried, key=measured.get)
        out.append({"vs_best": measured[kept] / min(measured.values()), "tried": len(tried),
                    "trial_cost": sum(measured[m] for m in tried) / len(tried) / measured[kept]})
    return out


def load(source: str, rev: bool) -> dict[str, Any]:
    if rev:
        text = subprocess.run(["git", "show", f"{source}:{RESULTS}"], check=True, capture_output=True, text=True).stdout
        return json.loads(text)
    return json.loads(Path(source).read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="ncio.json files")
    ap.add_argument("--rev", action="append", default=[], help=f"a git revision whose {RESULTS} to refit")
    ap.add_argument("--misses", action="store_true", help="list the predictions more than 25 %% off")
    ap.add_argument("--both", action="store_true",
                    help="fit to the calibration samples timed before and after the sweep (where stored)")
    ap.add_argument("--margins", help="tie margins to replay auto's trials with, e.g. 0.1,0.25")
    ap.add_argument("--json", type=Path, help="save the figures here")
    args = ap.parse_args(argv)
    sources = [(f, False) for f in args.files] + [(r, True) for r in args.rev]
    sources = sources or [(RESULTS, False)]
    margins = [float(m) for m in args.margins.split(",")] if args.margins else []
    out: dict[str, Any] = {}
    choices: dict[float, list[dict[str, Any]]] = {m: [] for m in margins}
    for source, rev in sources:
        run = load(source, rev)
        if not run.get("calibration", {}).get("samples"):
            print(f"{source}: no calibration samples stored (run with a fresh calibration)", file=sys.stderr)
            continue
        model = refit(run, args.both)
        result = score(run, model)
        out[source] = result
        for margin in margins:
            choices[margin] += replay(run, model, margin)
        print(f"{source:60s} {result['within_25pct']:4d} of {result['predictions']} within 25 %, "
              f"median error {100 * result['median_error']:.1f} %")
        for m in result["misses"] if args.misses else ():
            print(f"    {m['point']:24s} {m['direction']:5s} {m['method']:10s} {m['measured_ms']:9.3f} ms  "
                  f"predicted x{m['ratio']:.2f}")
    for margin, points in choices.items():
        slow = [p["vs_best"] for p in points if p["vs_best"] > 1.10]
        trials = [p["trial_cost"] for p in points if p["tried"] > 1]
        geomean = statistics.geometric_mean([p["vs_best"] for p in points])
        out[f"margin {margin}"] = {"points": len(points), "over_10pct": len(slow), "geomean": geomean,
                                   "worst": max(p["vs_best"] for p in points),
                                   "trials": len(trials), "trial_cost": statistics.mean(trials) if trials else 1.0}
        print(f"tie margin {margin:.0%}: auto's choice more than 10 % slower than the best at {len(slow)} of "
              f"{len(points)} points (geomean {geomean:.3f}, worst {out[f'margin {margin}']['worst']:.2f}x); trials at {len(trials)} points, "
              f"their accesses x{out[f'margin {margin}']['trial_cost']:.2f} the method kept")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
