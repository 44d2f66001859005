"""The readers the export tests check files with: ``h5dump``, ``ncdump`` and the Exodus C library.

``python tests/integration/readers.py install`` (``make readers``) installs Debian's
``hdf5-tools`` (h5dump), ``netcdf-bin`` (ncdump), ``gcc`` and ``libc6-dev`` (a C compiler)
and ``libexodusii-dev`` (Sandia's Exodus II C library, header ``exodusII.h``, linked with
``-lexoIIv2c``) for those missing; it needs root and apt-get, and does nothing when every
program is on ``PATH`` and every header in ``/usr/include``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["PACKAGES", "HEADERS", "ReadersError", "install", "missing"]

#: program -> the Debian package that provides it
PACKAGES = {"h5dump": "hdf5-tools", "ncdump": "netcdf-bin", "cc": "gcc"}
#: C header (under /usr/include) -> the Debian package that provides it
HEADERS = {"stdio.h": "libc6-dev", "exodusII.h": "libexodusii-dev"}


class ReadersError(RuntimeError):
    """The readers are missing and cannot be installed here."""


def missing() -> list[str]:
    """The programs of :data:`PACKAGES` not found on ``PATH`` and the headers of :data:`HEADERS` not installed."""
    return ([prog for prog in PACKAGES if shutil.which(prog) is None] +
            [header for header in HEADERS if not (Path("/usr/include") / header).exists()])


def install() -> None:
    """Install the Debian packages of the missing readers (apt-get, as root).

    Raises
    ------
    ReadersError
        A reader is missing and this is not root with apt-get, or apt-get failed.
    """
    absent = missing()
    if not absent:
        return
    packages = sorted({{**PACKAGES, **HEADERS}[p] for p in absent})
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ReadersError(f"{', '.join(absent)} not found and cannot be installed automatically (needs root and "
                           f"apt-get); install the Debian packages {', '.join(packages)}")
    print(f"readers: {', '.join(absent)} not found; installing Debian packages {', '.join(packages)}",
          file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", *packages]):
        result = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise ReadersError(f"{' '.join(cmd)} failed (exit {result.returncode}):\n{result.stdout[-4000:]}")
    still = missing()
    if still:
        raise ReadersError(f"installed {', '.join(packages)} but {', '.join(still)} is still missing")


def main(argv: list[str] | None = None) -> int:
    """``readers.py install``: install what is missing; exit status 1 with a message if that fails."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["install"]:
        print("usage: readers.py install", file=sys.stderr)
        return 2
    try:
        install()
    except ReadersError as exc:
        print(f"readers: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
