"""Benchmark tooling behind ``sdm bench ncio`` and ``sdm calibrate`` (not needed to choose methods).

NCIO patterns (:mod:`~sdm.bench.patterns`), timing helpers (:mod:`~sdm.bench.measure`),
the NCIO sweep and its reports (:mod:`~sdm.bench.ncio`; its plot needs matplotlib, the
``bench`` extra) and the calibration of the cost model (:mod:`~sdm.bench.calibrate`).
The planner itself (:mod:`sdm.planner`) imports none of it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["rounded"]


def rounded(obj: Any, digits: int = 4) -> Any:
    """*obj* (JSON-like: dicts, lists, numbers) with every float cut to *digits* significant digits.

    Benchmark results keep their samples this way: timings are not more precise than
    that, and the files stay small.
    """
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [rounded(v, digits) for v in obj]
    return obj
