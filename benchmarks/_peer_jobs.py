"""The peer stack's jobs, shared by ``async.py`` and ``compression.py``: where its Python and
mpiexec are (else this Python's MPI, SDM alone), the mpiexec line, a job's JSON answer, the grid
of ranks and ADIOS2's build facts."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from peers import launch  # noqa: E402 - the peer benchmark's job launch (its own session, killed past its limit)


class PeerJobs:
    """mpiexec and the drivers: the peer stack's (Open MPI) when built, else this Python's MPI (SDM only).

    *adios2* names the ADIOS2 driver in the stack's ``bin``.
    """

    def __init__(self, peers: Path, adios2: str) -> None:
        self.peers = peers
        self.python = peers / "venv" / "bin" / "python"
        self.mpiexec = Path(shutil.which("mpiexec.openmpi") or "/usr/bin/mpiexec.openmpi")
        self.adios2 = peers / "bin" / adios2
        self.stack = self.python.exists() and self.mpiexec.exists()
        self.why = "" if self.stack else f"the peer stack is not built ({self.python} missing): run `make peers`"
        if not self.stack:
            self.python = Path(sys.executable)
            self.mpiexec = self.python.parent / "mpiexec"

    def mpi(self, nprocs: int) -> list[str]:
        """The mpiexec line of *nprocs* ranks (Open MPI's: as root, any number of ranks, unbound)."""
        if self.stack:
            return [str(self.mpiexec), "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-n", str(nprocs)]
        return [str(self.mpiexec), "-n", str(nprocs)]

    def run(self, cmd: list[str], env: dict[str, str], limit: float) -> tuple[int, str, str] | dict[str, Any]:
        """*cmd*'s exit status and output, or its ``error`` record when it gave no answer within *limit*."""
        ended = launch(cmd, env, limit)
        return {"error": f"no answer within {limit:.0f} s"} if ended is None else ended

    @staticmethod
    def answer(returncode: int, out: str, err: str) -> dict[str, Any]:
        """The driver's last JSON line, or an ``error`` record with the end of its stderr."""
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if returncode != 0 or not lines:
            return {"error": f"exit {returncode}: {err.strip()[-600:]}"}
        return json.loads(lines[-1])  # type: ignore[no-any-return]

    def adios2_config(self) -> str:
        """The text of the stack's ``ADIOSConfig.h`` ("" when absent)."""
        cfg = self.peers / "adios2" / "include" / "adios2" / "common" / "ADIOSConfig.h"
        return cfg.read_text() if self.stack and cfg.exists() else ""

    def adios2_version(self) -> str:
        return next((line.split()[-1].strip('"') for line in self.adios2_config().splitlines()
                     if "ADIOS2_VERSION_STR" in line), "?")


def dims3(nprocs: int) -> tuple[int, int, int]:
    """``MPI_Dims_create(nprocs, 3)`` (balanced, non-increasing), without starting MPI here."""
    factors, m, p = [], nprocs, 2
    while m > 1:
        while m % p == 0:
            factors.append(p)
            m //= p
        p += 1
    dims = [1, 1, 1]
    for f in sorted(factors, reverse=True):
        dims[dims.index(min(dims))] *= f
    return tuple(sorted(dims, reverse=True))  # type: ignore[return-value]
