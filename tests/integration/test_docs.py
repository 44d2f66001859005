"""Every code block of README.md and of the manual (docs/) runs as pasted and prints what the page says.

``tests/integration/docblocks.py`` holds the convention and the runner: each page runs in a fresh
directory laid out like a clone, its bash blocks in one shell, its python blocks in one Python
process, each ```` ```text ```` block after a block compared with what that block printed.

Servers a page asks for (``<!-- test needs: s3, postgres -->``) come from the session's fixtures,
through the variables the pages document:

* ``s3``: ``SDM_S3_ENDPOINT`` (the versitygw of ``s3_server``) and the standard ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``;
* ``postgres``: ``PG_URL``, a fresh database of the test PostgreSQL server.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

import docblocks

PAGES = docblocks.pages()


def _id(path: Path) -> str:
    return str(path.relative_to(docblocks.REPO))


def test_pages_follow_the_convention() -> None:
    found = [p for path in PAGES for p in docblocks.problems(docblocks.parse(path))]
    assert not found, "\n".join(found)
    assert len(PAGES) > 10 and all(docblocks.parse(p).runnable for p in PAGES if p.name == "README.md")


def test_matching() -> None:
    m = docblocks.matches
    assert m("a\n...\nd", "a\nb\nc\nd") and m("a\n...\nd", "a\nd") and not m("a\n...\nd", "a\nb")
    assert m("run ... steps [0, 10]", "run 7 steps [0, 10]  ") and not m("run 1", "run 12")
    assert m("\nx\n", "x\n\n") and not m("x", "x\ny") and m("...", "")


@pytest.mark.timeout(300)  # a page is a few seconds; under a loaded machine several times that
@pytest.mark.parametrize("path", PAGES, ids=_id)
def test_page_blocks_run(path: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    page = docblocks.parse(path)
    if not page.runnable:
        return  # nothing on this page runs (test_pages_follow_the_convention checks its blocks)
    extra: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if "s3" in page.needs:
            server = request.getfixturevalue("s3_server")
            extra.update(server.env())
            extra["SDM_S3_ENDPOINT"] = server.endpoint
        if "postgres" in page.needs:
            extra["PG_URL"] = stack.enter_context(request.getfixturevalue("postgres_server").fresh_database())
        if any(b.lang == "bash" and "make " in b.code for b in page.runnable):
            _venv_is_current(tmp_path)
        (tmp_path / "home").mkdir()
        start = time.monotonic()
        results = docblocks.run_page(page, tmp_path / "work", docblocks.environment(tmp_path / "home", extra))
    slow = sorted(results, key=lambda r: -r.seconds)[:3]
    print(f"{_id(path)}: {len(results)} blocks in {time.monotonic() - start:.1f} s; slowest: "
          + ", ".join(f"line {r.block.line} {r.seconds:.1f} s" for r in slow))
    for b in page.not_run:
        print(f"not run: {b.where}: {b.not_run}")


def _venv_is_current(tmp_path: Path) -> None:
    """A page's `make demo` must find .venv installed: never let it pip install from a scratch directory."""
    import subprocess

    docblocks.lay_out(tmp_path / "work")
    q = subprocess.run(["make", "-q", ".venv/.installed-runtime"], cwd=tmp_path / "work", capture_output=True)
    if q.returncode != 0:
        pytest.fail(".venv is older than pyproject.toml (or not made by `make venv`): run `make venv` first",
                    pytrace=False)


def test_benchmark_commands_name_real_scripts_and_options() -> None:
    """benchmarks/README.md (the manual's "How the benchmarks run") runs for hours, so its commands
    are not run here: each must name a script that exists and options that its scripts define."""
    import re

    bench = docblocks.REPO / "benchmarks"
    source = "\n".join(p.read_text() for p in bench.glob("*.py"))
    blocks = re.findall(r"^```(?:sh|bash)\n(.*?)^```", (bench / "README.md").read_text(), re.S | re.M)
    commands, bad = 0, []
    for line in (ln for b in blocks for ln in b.splitlines()):
        for m in re.finditer(r"benchmarks/([\w/]+\.(?:py|sh))((?:\s+[^|;&#]*)?)", line.split("#", 1)[0]):
            commands += 1
            if not (bench / m.group(1)).is_file():
                bad.append(f"no script benchmarks/{m.group(1)}: {line}")
            bad += [f"no option {opt} in benchmarks/*.py: {line}" for opt in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", m.group(2))
                    if f'"{opt}"' not in source and f"'{opt}'" not in source]
    assert commands > 20 and not bad, "\n".join(bad)
