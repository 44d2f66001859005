"""Refit stored NCIO runs with the current cost model, without running any I/O.

Every ``ncio.json`` keeps the samples and direct timings of the calibration behind its
predictions.  This script recomputes each sample's cost units with the model as it is
now, fits the constants again (:func:`sdm.planner.calibrate.fit`) and predicts every
point of the run's sweep, so that a change of the model is judged against several
measured runs at once instead of one new, noisy run.

Usage::

    python benchmarks/refit.py benchmarks/results/ncio.json           # a file
    python benchmarks/refit.py --rev HEAD --rev HEAD~5 --misses        # runs committed in git

Prints, per run, the predictions within 25 % of measured (and, with ``--misses``, the
points outside); ``--json FILE`` saves the same figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from sdm.planner import Access, row_bytes
from sdm.planner.calibrate import Sample, fit
from sdm.planner.model import DEFAULTS, CostModel, structure
from sdm.planner.patterns import ITEM, Pattern

RESULTS = "benchmarks/results/ncio.json"


def access(pattern: Pattern, writing: bool, nprocs: int) -> Access:
    """The planner's view of *pattern* on *nprocs* ranks (what ``pattern_access`` builds under MPI)."""
    stats = [pattern.stats(nprocs, r).as_tuple() for r in range(nprocs)]
    return Access.from_stats(stats, writing=writing, level=1, itemsize=ITEM, total_bytes=pattern.file_bytes(nprocs),
                             row_bytes=row_bytes(pattern.shape(nprocs), ITEM))


def refit(run: dict[str, Any]) -> CostModel:
    """The model the current code fits to *run*'s stored calibration samples."""
    stored = run["model"]
    nprocs, cores, romio = stored["nprocs"], stored["cores"], stored.get("romio", {})
    direct = run["calibration"]["direct"]
    blank = CostModel(nprocs=nprocs, cores=cores, romio=romio)
    samples = []
    for s in run["calibration"]["samples"]:
        pattern = Pattern(**s["pattern"])
        counts = structure(s["method"], access(pattern, s["writing"], nprocs), blank.params()).counts()
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
        a = access(pattern, writing, nprocs)
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
    ap.add_argument("--json", type=Path, help="save the figures here")
    args = ap.parse_args(argv)
    sources = [(f, False) for f in args.files] + [(r, True) for r in args.rev] or [(RESULTS, False)]
    out = {}
    for source, rev in sources:
        run = load(source, rev)
        if not run.get("calibration", {}).get("samples"):
            print(f"{source}: no calibration samples stored (run with a fresh calibration)", file=sys.stderr)
            continue
        result = score(run, refit(run))
        out[source] = result
        print(f"{source:40s} {result['within_25pct']:4d} of {result['predictions']} within 25 %, "
              f"median error {100 * result['median_error']:.1f} %")
        for m in result["misses"] if args.misses else ():
            print(f"    {m['point']:24s} {m['direction']:5s} {m['method']:10s} {m['measured_ms']:9.3f} ms  "
                  f"predicted x{m['ratio']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
