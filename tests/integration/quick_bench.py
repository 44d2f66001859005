"""Run a benchmark script of ``benchmarks/`` with ``--quick`` and return what it wrote (for smoke tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 600


def run_quick(name: str, out: Path, *extra: str, png: bool = True) -> dict:
    """``benchmarks/<name>.py --quick --out OUT EXTRA...``: it must succeed and write its JSON, Markdown and
    (with *png*) PNG.

    Returns the JSON it wrote.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / f"{name}.py"), "--quick", "--out", str(out),
                           *extra], capture_output=True, text=True, timeout=TIMEOUT, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    for suffix in ("json", "md", "png")[:3 if png else 2]:
        assert (out / f"{name}.{suffix}").stat().st_size > 0
    return json.loads((out / f"{name}.json").read_text())
