"""Summarise the parts of ``make test`` and exit non-zero if any part failed.

Usage: ``python tools/test_summary.py RESULTS_DIR PART...``; each PART has ``PART.rc`` (exit
status) and ``PART.log`` (output) in RESULTS_DIR, written by the Makefile.

A part passes when its exit status is 0. Exit status 5 (pytest collected no tests) passes
only for an ``mpi-*`` part while tests/mpi holds no test files yet; anywhere else it fails.
The last line printed is ``summary: N passed, N failed, N skipped`` over all parts (a part
that failed without a pytest summary line, e.g. killed by a timeout, counts as one failure).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# pytest's closing line, e.g. "1 failed, 3 passed, 1 skipped, 2 warnings in 4.12s"
CLOSING = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+|no tests ran) in [\d.]+s\b")
COUNT = re.compile(r"(\d+) ([a-z]+)")


def has_test_files(directory: Path) -> bool:
    return any(directory.rglob("test_*.py")) or any(directory.rglob("*_test.py"))


def closing_counts(log: str) -> dict[str, int] | None:
    """Counts from the last pytest closing line of a log, or None if there is none."""
    counts = None
    for line in log.splitlines():
        match = CLOSING.match(line.strip())
        if match:
            counts = {}
            for number, word in COUNT.findall(match.group(1)):
                word = {"error": "errors", "warning": "warnings"}.get(word, word)
                counts[word] = counts.get(word, 0) + int(number)
    return counts


def verdict(part: str, rc: int | None, counts: dict[str, int] | None) -> tuple[bool, str]:
    if rc is None:
        return False, "did not run"
    if rc == 0:
        return True, "ok"
    if rc == 5:
        if part.startswith("mpi-") and not has_test_files(REPO / "tests" / "mpi"):
            return True, "ok (no tests: tests/mpi has no test files yet)"
        return False, "FAILED: no tests collected"
    if rc in (124, 137):
        return False, "FAILED: timed out (killed by `timeout`)"
    return False, f"FAILED (exit status {rc})"


def main(argv: list[str]) -> int:
    results, parts = Path(argv[0]), argv[1:]
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    all_ok = True
    lines = []
    for part in parts:
        try:
            rc = int((results / f"{part}.rc").read_text().strip())
        except (OSError, ValueError):
            rc = None
        try:
            log = (results / f"{part}.log").read_text(errors="replace")
        except OSError:
            log = ""
        counts = closing_counts(log)
        ok, text = verdict(part, rc, counts)
        all_ok &= ok
        mypy = re.search(r"^(Success: .*|Found \d+ errors? in .*)$", log, re.M)
        detail = (mypy.group(1) if mypy and counts is None else "no pytest summary" if counts is None else
                  ", ".join(f"{n} {w}" for w, n in counts.items()) or "no tests ran")
        counts = counts or {}
        failed = counts.get("failed", 0) + counts.get("errors", 0)
        if not ok and failed == 0:
            failed = 1  # the part itself failed (timeout, crash, abort, no tests)
        totals["passed"] += counts.get("passed", 0)
        totals["failed"] += failed
        totals["skipped"] += counts.get("skipped", 0)
        lines.append(f"  {part:<10} {text:<50} {detail}")
    print()
    print("=" * 30 + " make test summary " + "=" * 30)
    print("\n".join(lines))
    print("result: " + ("all parts passed" if all_ok else "SOME PARTS FAILED"))
    print(f"summary: {totals['passed']} passed, {totals['failed']} failed, "
          f"{totals['skipped']} skipped")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
