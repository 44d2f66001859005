"""Real files written by SDM, the seeds that hostile-file tests and the format fuzzer change.

One run is written with ``sdm.open`` in this process (one rank, no ``mpiexec``): a
level-3 group of two float64 fields (an overwrite, attributes, infos), a level-2 group
of int32 series, a ranked dataset, an import, and a second session that truncates the
series and closes again; so its meta-file holds every common record type and its data
files end with trailers.  The reference arrays are built here with numpy alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHAPE = (4, 3)
SERIES = (5,)
ROWS = np.arange(6, dtype="<i8").reshape(3, 2) * 7


def field(name: str, step: int, version: int = 1) -> np.ndarray:
    """Step *step* of field *name* (``T`` or ``P``) as written (version 2: the overwrite of T at step 1)."""
    base = {"T": 100.0, "P": -3.0}[name] + step + (0.5 if version == 2 else 0.0)
    return base + np.arange(np.prod(SHAPE), dtype="<f8").reshape(SHAPE) / 4


def series(step: int) -> np.ndarray:
    return (np.arange(SERIES[0], dtype="<i4") + 10 * step).astype("<i4")


@dataclass(frozen=True)
class Seed:
    """Where the seed run lies."""

    root: Path
    url: str
    run_dir: Path
    run_id: int

    @property
    def fields(self) -> Path:
        """The level-3 file of group ``fields`` (T and P, steps 0-2)."""
        return self.run_dir / "fields.sdm"

    @property
    def parts(self) -> Path:
        """The level-3 file of the ranked group ``parts``."""
        return self.run_dir / "parts.sdm"

    @property
    def series(self) -> Path:
        """The level-2 file of dataset ``n`` of group ``series`` (steps 0-1 after the truncation)."""
        return self.run_dir / "series.n.sdm"


def write_seed_run(root: Path) -> Seed:
    """Write the seed run under *root* (its catalog ``root/catalog.db``)."""
    import sdm

    url = f"sqlite:///{root}/catalog.db"
    source = root / "external.bin"
    source.write_bytes(np.arange(4, dtype="<f8").tobytes())
    with sdm.open("seed", root=str(root), catalog=url, attributes={"case": "seed", "nx": 4}) as s:
        g = s.make_group("fields", ["T", "P"], dtype="<f8", shape=SHAPE, level=3)
        g.set_attributes({"units": "K"})
        for step in range(3):
            g.write_step(step, {"T": field("T", step), "P": field("P", step)})
        g.write("T", 1, field("T", 1, version=2), overwrite=True)
        g.set_info("material", np.arange(6, dtype=">f8").reshape(2, 3), dataset="T")
        h = s.make_group("series", ["n"], dtype="<i4", shape=SERIES, level=2)
        for step in range(4):
            h.write("n", step, series(step))
        r = s.make_group("parts", ["pos"], dtype="<i8", shape=(2,), level=3, view=sdm.Ranked())
        r.write("pos", 0, ROWS)
        s.set_info("mesh", np.arange(3, dtype="<i8"))
        s.import_array("imported", str(source), dtype="<f8", count=4)
        run_id = s.run_id
    with sdm.open("seed", "a", root=str(root), catalog=url, run=run_id) as s:
        s.truncate(after_step=1, groups=["series"])
    (run_dir,) = sorted((root / "seed").glob("run-*"))
    return Seed(root, url, run_dir, run_id)
