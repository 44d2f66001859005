"""What an export or an import reports, and the ``--steps`` argument they share (also :mod:`sdm.exporting.exodus`'s)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InvalidArgumentError

__all__ = ["ExportReport", "ImportReport", "parse_steps"]


@dataclass
class ExportReport:
    """What :func:`export` wrote."""

    run: int
    format: str
    out: str
    groups: list[str]
    arrays: int
    steps: int  #: steps of datasets read and written
    nbytes: int  #: bytes of data written (before compression)
    seconds: float
    notes: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    """What :func:`import_file` wrote."""

    run: int
    application: str
    source: str
    format: str
    groups: list[str]
    datasets: int
    steps: int  #: steps of datasets written
    nbytes: int
    seconds: float
    notes: list[str] = field(default_factory=list)


def parse_steps(spec: str | None) -> tuple[int, int | None, int]:
    """``START:STOP[:STRIDE]`` (STOP excluded, as a Python slice), ``START:``, ``:STOP`` or ``K``.

    Returns
    -------
    (start, stop or None, stride)

    Raises
    ------
    InvalidArgumentError
        Anything else (negative numbers, a stride < 1, text).
    """
    if spec is None:
        return 0, None, 1
    bad = InvalidArgumentError(f"bad steps {spec!r}: write START:STOP[:STRIDE] (STOP excluded), START:, :STOP or one "
                               "step K, with integers >= 0 and STRIDE >= 1")
    parts = str(spec).strip().split(":")
    if len(parts) > 3 or not all(p.strip().isdigit() or (p.strip() == "" and len(parts) > 1) for p in parts):
        raise bad
    nums = [int(p) if p.strip() else None for p in parts]
    if len(nums) == 1:
        assert nums[0] is not None
        return nums[0], nums[0] + 1, 1
    start, stop = nums[0] or 0, nums[1]
    stride = 1 if len(nums) < 3 or nums[2] is None else nums[2]
    if stride < 1:
        raise bad
    return start, stop, stride
