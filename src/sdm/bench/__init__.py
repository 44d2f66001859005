"""Benchmark tooling behind ``sdm bench ncio`` and ``sdm calibrate`` (not needed to choose methods).

NCIO patterns (:mod:`~sdm.bench.patterns`), timing helpers (:mod:`~sdm.bench.measure`),
the NCIO sweep and its reports (:mod:`~sdm.bench.ncio`; its plot needs matplotlib, the
``bench`` extra) and the calibration of the cost model (:mod:`~sdm.bench.calibrate`).
The planner itself (:mod:`sdm.planner`) imports none of it.
"""
