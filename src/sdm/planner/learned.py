"""What trials learned, kept per catalog and storage target across runs.

A trial (:mod:`sdm.planner.trials`) settles the method of one access pattern; a later
run writing the same pattern to the same target starts with that method instead of
measuring again.  A pattern is named by :func:`pattern_digest` (the access's key with
the session's hints, hashed), the target by the session's data root, as calibrations
are.  The catalog keeps one choice per (target, pattern) in ``planner_choices``
(schema revision 0012); rank 0 reads them when a session opens and the other ranks
get them in the same broadcast as the calibration, so every rank decides alike.

A stored choice is trusted for :data:`RECHECK` runs of the catalog after the run that
measured it; the next run of the pattern measures again (the target may have changed),
and its result replaces the stored one.  Rows read back are untrusted: a row naming an
unknown method, or a malformed digest, is skipped.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

__all__ = ["RECHECK", "MOST_ROWS", "Learned", "pattern_digest", "from_rows"]

#: A stored choice is used by the runs that come less than this many runs of the catalog after its trial.
RECHECK = 16
#: Stored choices a session loads at most (the newest first).
MOST_ROWS = 512
_DIGEST = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Learned:
    """The method a trial settled for one access pattern on one target.

    Attributes
    ----------
    method : str
        The measured fastest method.
    summary : str
        The trial's medians in a few words (:meth:`~sdm.planner.trials.Trial.summary`).
    run_id : int
        The run whose trial measured it.
    """

    method: str
    summary: str
    run_id: int

    def due(self, run_id: int | None) -> bool:
        """Whether run *run_id* measures the pattern again instead of trusting this choice."""
        return run_id is not None and run_id - self.run_id >= RECHECK

    def as_row(self, pattern: str) -> dict[str, Any]:
        """The catalog row's values (without the target)."""
        return {"pattern": pattern, "method": self.method, "summary": self.summary, "run_id": self.run_id}


def pattern_digest(key: tuple, hints: Mapping[str, Any], mpi_hints: Mapping[str, Any]) -> str:
    """A stable name of an access pattern under the session's hints (32 hex digits)."""
    text = repr((key, sorted((str(k), repr(v)) for k, v in hints.items()),
                 sorted((str(k), repr(v)) for k, v in mpi_hints.items())))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def from_rows(rows: Iterable[Mapping[str, Any]], methods: Iterable[str]) -> dict[str, Learned]:
    """Choices from catalog rows, the malformed ones left out (the first row of a pattern wins)."""
    known, out = set(methods), dict[str, Learned]()
    for row in rows:
        pattern, method, summary, run_id = (row.get(k) for k in ("pattern", "method", "summary", "run_id"))
        if not (isinstance(pattern, str) and _DIGEST.fullmatch(pattern) and method in known
                and isinstance(run_id, int) and not isinstance(run_id, bool)):
            continue
        out.setdefault(pattern, Learned(str(method), str(summary or "")[:200], int(run_id)))
    return out
