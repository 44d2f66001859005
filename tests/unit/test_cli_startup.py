"""What starting SDM loads: `import sdm` and the `sdm` command stay light (modules, never time).

Each check runs in a fresh interpreter (``sys.modules`` of this test process holds
whatever earlier tests imported) and lists which heavy modules it loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sdm.catalog import Catalog, DatasetSpec

pytestmark = pytest.mark.timeout(120)

SRC = Path(__file__).resolve().parents[2] / "src"
HEAVY = ("sqlalchemy", "alembic", "mako", "matplotlib", "typer", "rich", "click", "mpi4py", "numpy", "h5py")


def _loaded(code: str, env: dict[str, str] | None = None) -> tuple[list[str], str]:
    """Run *code* in a fresh interpreter; the HEAVY top-level modules it loaded, and its stdout."""
    probe = (f"{code}\nimport sys\nprint('\\nLOADED ' + ' '.join(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    head, _, tail = out.stdout.rpartition("\nLOADED")
    return tail.split(), head


def _cli(*argv: str) -> str:
    """Code that runs ``sdm ARGV`` in-process (its exit is caught) and prints nothing else."""
    return ("import sys\nfrom sdm._cli.main import main\nsys.argv = ['sdm', " + ", ".join(map(repr, argv)) + "]\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n")


def test_import_sdm_loads_nothing_heavy() -> None:
    loaded, _ = _loaded("import sdm")
    assert loaded == []


def test_the_public_api_still_answers_after_a_light_import(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/catalog.db"
    code = (
        "import sdm\n"
        "assert sdm.CatalogError.__module__ == 'sdm.errors' and issubclass(sdm.RunNotFoundError, KeyError)\n"
        "from sdm.catalog import RunRecord, DatasetSpec, redact_url\n"
        "import sys\n"
        "assert redact_url('sqlite:///x.db') == 'sqlite:///x.db'\n"
        "assert 'sqlalchemy' not in sys.modules  # records and URL helpers need no database engine\n"
        "assert redact_url('postgresql://u:pw@h/db') == 'postgresql://u:***@h/db'\n"
        f"cat = sdm.Catalog({url!r})\n"
        "run = cat.create_run('app', nprocs=2, root='/data', attributes={'res': 64})\n"
        "cat.close()\n"
        f"(rec,) = sdm.find({url!r}, application='app')\n"
        "assert (rec.id, rec.attributes) == (run, {'res': 64}) and isinstance(rec, RunRecord)\n"
        "assert sdm.Catalog is sdm.catalog.Catalog and callable(sdm.open) and sdm.Block is sdm.layout.Block\n"
    )
    loaded, _ = _loaded(code)
    assert "sqlalchemy" in loaded and "alembic" not in loaded and "typer" not in loaded


def test_sdm_help_loads_no_catalog_no_mpi_and_no_rich() -> None:
    loaded, out = _loaded(_cli("--help"))
    assert "verify" in out and "bench" in out and "ls" in out
    assert set(loaded) & {"sqlalchemy", "alembic", "mpi4py", "numpy", "matplotlib", "rich"} == set()


@pytest.mark.parametrize("argv", [("ls",), ("ls", "app"), ("ls", "--json"), ("show", "1"), ("find", "res=64"),
                                  ("verify", "1")])
def test_catalog_commands_load_no_mpi(tmp_path: Path, argv: tuple[str, ...]) -> None:
    url = f"sqlite:///{tmp_path}/catalog.db"
    cat = Catalog(url)
    run = cat.create_run("app", nprocs=2, root=str(tmp_path), attributes={"res": 64})
    cat.define_group(run, "g", 2, [DatasetSpec("a", "<f8", (4,), "C")])
    cat.close()
    loaded, out = _loaded(_cli(*argv), env={"SDM_CATALOG": url})
    assert set(loaded) & {"alembic", "mpi4py", "matplotlib", "h5py"} == set(), argv
    if argv[0] == "ls":  # an SQLite catalog's listing: sqlite3 alone (sdm.catalog.listing)
        assert set(loaded) & {"sqlalchemy", "numpy"} == set(), argv
    if argv == ("ls", "--json"):
        assert json.loads(out)["applications"][0]["name"] == "app"
    else:
        assert out.strip(), argv
