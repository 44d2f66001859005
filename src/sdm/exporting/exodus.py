"""Exodus II files from and into SDM runs: ``sdm export RUN --format exodus`` and ``sdm import FILE --format exodus``.

The finite element model's sink and source among the export formats, over :mod:`sdm.fem`.

The export reads the stored model whole in one process (:func:`sdm.fem.store.read_mesh`
with ``share="whole"``: the many-to-one read a visualization makes) and writes the
Exodus II file step by step (:func:`sdm.fem.exodus.write`), reading one step of results
while the previous one is written out: never more than one step of results in memory.
The import writes a file's model and results into a new run (:func:`~sdm.fem.store.write_mesh`
and :func:`~sdm.fem.store.write_results` in one process).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from ..catalog import RunRecord
    from .reports import ExportReport, ImportReport

__all__ = ["export_exodus", "import_exodus"]

Progress = Callable[[int, int], None]


def export_exodus(rec: "RunRecord", url: str, root: Any, target: Path, name: str | None, steps: str | None,
                  progress: Progress | None = None) -> "ExportReport":
    """Write the model *name* (default ``mesh``) of run *rec* and its results as the Exodus II file *target*.

    Raises
    ------
    GroupNotFoundError, InvalidArgumentError, StorageError
        Nothing is left at *target* after an error (the file is written aside and renamed).
    """
    from ..fem import exodus
    from ..fem.store import read_mesh, read_results
    from ..session import open as open_session
    from .reports import ExportReport, parse_steps

    mesh = name or "mesh"
    start, stop, stride = parse_steps(steps)
    t0 = time.perf_counter()
    with open_session(rec.application, "r", catalog=url, run=rec.id, **({"root": root} if root is not None else {})) as s:
        if mesh not in s.groups or f"{mesh}.results" not in s.groups:
            raise InvalidArgumentError(f"run {rec.id} holds no finite element model {mesh!r} (groups {s.groups}); "
                                       "write one with sdm.fem.store.write_mesh, or name it with --group")
        model = read_mesh(s, mesh, share="whole")
        written = s.group(f"{mesh}.results").steps("time")
        chosen = [k for k in written if k >= start and (stop is None or k < stop) and (k - start) % stride == 0]

        def results() -> Iterator[exodus.Step]:
            for done, step in enumerate(chosen, 1):
                r = read_results(s, model, step, mesh)
                yield exodus.Step(r.time, r.nodal, r.element, r.glob)
                if progress is not None:
                    progress(done, len(chosen))

        exodus.write(target, model, results())
    return ExportReport(rec.id, "exodus", str(target), [mesh, f"{mesh}.results"],
                        len(model.blocks) + len(model.variables.nodal) + len(model.variables.glob), len(chosen),
                        target.stat().st_size, time.perf_counter() - t0)


def import_exodus(src: Path, application: str, kwargs: dict[str, Any], progress: Progress | None = None
                  ) -> "ImportReport":
    """A new run of *application* holding the Exodus II file *src*'s model (group ``mesh``) and every step.

    Raises
    ------
    StorageError, InvalidArgumentError
    """
    from ..fem import exodus
    from ..fem.store import write_mesh, write_results
    from ..session import open as open_session
    from .reports import ImportReport

    t0 = time.perf_counter()
    model, steps = exodus.read(src)
    attributes = {**kwargs.pop("attributes", {}), "imported_from": str(src), "imported_format": "exodus"}
    with open_session(application, "w", attributes=attributes, **kwargs) as s:
        stored = write_mesh(s, model, "mesh")
        count = 0
        for count, step in enumerate(steps, 1):
            write_results(s, stored, count - 1, step.time, nodal=step.nodal, element=step.element, glob=step.glob)
            if progress is not None:
                progress(count, count)
        report = ImportReport(s.run_id, application, str(src), "exodus", ["mesh", "mesh.results"],
                              len(model.blocks), count, src.stat().st_size, 0.0)
    report.seconds = time.perf_counter() - t0
    return report
