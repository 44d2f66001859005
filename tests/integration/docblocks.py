"""Run the code blocks of a Markdown page in order, as a reader pasting them would, and compare outputs.

The convention of README.md and every page of docs/ (``docs/contributing.md`` says it too):

* a ```` ```bash ```` block runs in one shell per page (``bash`` with ``set -eo pipefail``; a
  failing command fails the page), its variables, directory and background jobs kept for
  the page's next blocks;
* a ```` ```python ```` block runs in one Python process per page, every block in the same
  namespace (no MPI job: one process, as ``python`` in a terminal);
* a ```` ```python title="NAME.py" ```` block is a file the page asks to save: it is written
  to ``NAME.py`` and runs only when a later shell block runs it (``mpiexec -n 2 python NAME.py``);
* a ```` ```text ```` block right after a bash or python block is what that block prints
  (stdout and stderr). Lines are compared with their trailing spaces removed; ``...`` in a
  line matches any text, and a line that is only ``...`` any number of lines;
* ``<!-- not run: REASON -->`` on the line before a block keeps it from running (it is
  reported, with the reason); ``<!-- test needs: s3, postgres -->`` anywhere in a page asks the
  test for those servers (``tests/integration/test_docs.py`` says which variables they set);
* any other block (no language, ``text`` not after a code block, ``json``, ``mermaid``, ...) is
  shown, not run.

Each page runs in a fresh directory that looks like a clone without data: links to the
repository's ``.venv``, ``src``, ``tests``, ``benchmarks``, ``tools``, ``Makefile`` and
``pyproject.toml``, with ``.venv/bin`` first on ``PATH`` (as after ``. .venv/bin/activate``)
and ``COLUMNS=100``.

By hand: ``.venv/bin/python tests/integration/docblocks.py docs/analysis.md`` runs one page
in a temporary directory and prints each block's output.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINKED = (".venv", "src", "tests", "benchmarks", "tools", ".tools", "Makefile", "pyproject.toml")
RUN_LANGS = {"bash", "python"}
SHOWN_LANGS = {"", "text", "json", "mermaid", "c", "toml", "yaml", "ini", "jsonl"}
NEEDS = {"s3", "postgres"}

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>.+?)\s*-->\s*$")
_NEEDS = re.compile(r"<!--\s*test needs:\s*(?P<what>[^>]+?)\s*-->")


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    attrs: dict[str, str]
    code: str
    not_run: str | None = None
    expected: Block | None = None  # the text block of what it prints
    is_output: bool = False

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page}:{self.line}"

    @property
    def file(self) -> str | None:
        """The file a python block is saved as (``title="NAME"``), or None."""
        return self.attrs.get("title") if self.lang == "python" else None


@dataclass
class Page:
    path: Path
    blocks: list[Block]
    needs: set[str] = field(default_factory=set)

    @property
    def runnable(self) -> list[Block]:
        return [b for b in self.blocks if b.lang in RUN_LANGS and b.not_run is None]

    @property
    def not_run(self) -> list[Block]:
        return [b for b in self.blocks if b.lang in RUN_LANGS and b.not_run is not None]


def _attrs(text: str) -> dict[str, str]:
    return {k: v1 or v2 for k, v1, v2 in re.findall(r'(\w+)=(?:"([^"]*)"|(\S+))', text)}


def parse(path: Path) -> Page:
    """The fenced blocks of *path*, each output block tied to the block before it."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    last_end = -10  # line index after the previous block's closing fence
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m["indent"]), m["fence"], m["info"].strip()
        lang, _, rest = info.partition(" ")
        lang = lang.strip("{}.").lower()
        j = i + 1
        body: list[str] = []
        while j < len(lines):
            close = lines[j].strip()
            if close.startswith(fence[0] * len(fence)) and set(close) == {fence[0]}:
                break
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        else:
            raise ValueError(f"{path}:{i + 1}: a code block that never closes")
        prev = i - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        marker = _NOT_RUN.match(lines[prev]) if prev >= 0 else None
        block = Block(path, i + 1, lang, _attrs(rest), "\n".join(body) + "\n", marker["reason"] if marker else None)
        gap = lines[last_end:i] if last_end >= 0 else ["x"]
        before = blocks[-1] if blocks else None
        if (lang == "text" and before is not None and before.lang in RUN_LANGS and not before.file
                and before.expected is None and not before.is_output and all(not g.strip() for g in gap)):
            before.expected = block
            block.is_output = True
        blocks.append(block)
        last_end = j + 1
        i = j + 1
    needs = {w.strip() for m in _NEEDS.finditer(path.read_text()) for w in m["what"].split(",")}
    return Page(path, blocks, needs)


def problems(page: Page) -> list[str]:
    """What breaks the convention: languages nothing runs or shows, outputs of blocks that do not run."""
    out = []
    for b in page.blocks:
        if b.lang not in RUN_LANGS | SHOWN_LANGS:
            out.append(f"{b.where}: block language {b.lang!r} (bash or python run; "
                       f"{', '.join(sorted(SHOWN_LANGS - {''}))} or none are shown)")
        if b.expected is not None and b.not_run is not None:
            out.append(f"{b.where}: a block that is not run has an output block")
        if b.lang == "bash":
            for line in b.code.splitlines():  # `nx>=32` bare would redirect into a file named `=32`
                bare = re.sub(r"'[^']*'|\"[^\"]*\"", "", line.split("  #", 1)[0])
                if re.search(r"\w(<|>|<=|>=|!=)\w", bare):
                    out.append(f"{b.where}: an unquoted comparison in a shell command: {line.strip()}")
        if b.lang == "python" and b.file and not re.fullmatch(r"[\w./-]+", b.file):
            out.append(f"{b.where}: title {b.file!r} is not a file name")
    for what in page.needs - NEEDS:
        out.append(f"{page.path}: unknown server {what!r} in <!-- test needs: ... --> ({', '.join(sorted(NEEDS))})")
    return out


# --------------------------------------------------------------------------- comparing outputs


def _norm(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def matches(expected: str, actual: str) -> bool:
    """*actual* fits *expected*: ``...`` in a line is any text; a line of ``...`` any lines."""
    want, got = _norm(expected), _norm(actual)
    pats = [None if w.strip() == "..." else re.compile(".*".join(re.escape(p) for p in w.split("..."))) for w in want]
    memo: dict[tuple[int, int], bool] = {}

    def fit(i: int, j: int) -> bool:
        if (i, j) in memo:
            return memo[i, j]
        if i == len(pats):
            ok = j == len(got)
        elif pats[i] is None:
            ok = fit(i + 1, j) or (j < len(got) and fit(i, j + 1))
        else:
            ok = j < len(got) and pats[i].fullmatch(got[j]) is not None and fit(i + 1, j + 1)
        memo[i, j] = ok
        return ok

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * (len(pats) + len(got)) + 100))
    return fit(0, 0)


# --------------------------------------------------------------------------- running


class BlockFailed(AssertionError):
    pass


_PY_WORKER = r"""
import json, os, sys, traceback
ns = {"__name__": "__main__"}
ctl = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    req = json.loads(line)
    fd = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush(); sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(fd, 1); os.dup2(fd, 2)
    ok = True
    try:
        exec(compile(req["code"], req["name"], "exec"), ns)
    except SystemExit as exc:
        ok = exc.code in (None, 0)
    except BaseException:
        traceback.print_exc(); ok = False
    finally:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        os.close(fd); os.close(saved[0]); os.close(saved[1])
    ctl.write(json.dumps({"ok": ok}) + "\n"); ctl.flush()
"""


def _readline(proc: subprocess.Popen, timeout: float) -> str | None:
    """One line of *proc*'s stdout within *timeout* seconds; None at its end or past the time."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    buf = b""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return None
            chunk = os.read(proc.stdout.fileno(), 1)
            if not chunk:
                return None
            buf += chunk
            if chunk == b"\n":
                return buf.decode()
    finally:
        sel.close()


def environment(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """What a page's commands see: the venv first on PATH, this checkout's src, 100 columns."""
    venv = Path(sys.executable).parent.parent
    env = {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "VIRTUAL_ENV": str(venv),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "COLUMNS": "100",
        "PYTHONPATH": str(REPO / "src"),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env.update({k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS_", "SDM_TOOLS_BIN", "SDM_PG_"))})
    env.update(extra or {})
    return env


def lay_out(work: Path) -> None:
    """A fresh directory that looks like a clone without data."""
    work.mkdir(parents=True, exist_ok=True)
    venv = Path(sys.executable).parent.parent
    for name in LINKED:
        target = venv if name == ".venv" else REPO / name
        if target.exists() and not (work / name).exists():
            (work / name).symlink_to(target)


@dataclass
class Result:
    block: Block
    output: str
    seconds: float


class PageRun:
    """The shell and the Python process of one page, in its directory."""

    def __init__(self, page: Page, work: Path, env: dict[str, str], timeout: float = 180.0) -> None:
        self.page, self.work, self.env, self.timeout = page, work, env, timeout
        self.ctl = Path(tempfile.mkdtemp(prefix="sdm-docblocks-"))
        self.bash: subprocess.Popen | None = None
        self.python: subprocess.Popen | None = None
        self.count = 0

    def __enter__(self) -> PageRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for proc in (self.bash, self.python):
            if proc is None:
                continue
            try:
                if proc.stdin:
                    proc.stdin.close()
                proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                pass
            try:  # whatever the page left running (background jobs, a stuck mpiexec)
                os.killpg(proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.bash = self.python = None
        for f in self.ctl.iterdir():
            f.unlink()
        self.ctl.rmdir()

    def _start(self, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(argv, cwd=self.work, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def _send(self, proc: subprocess.Popen, text: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(text.encode())
        proc.stdin.flush()

    def run(self, block: Block) -> Result:
        self.count += 1
        out = self.ctl / f"out{self.count}"
        start = time.monotonic()
        if block.file:
            target = self.work / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code)
            return Result(block, "", 0.0)
        if block.lang == "bash":
            if self.bash is None:
                self.bash = self._start(["bash", "--noprofile", "--norc"])
                self._send(self.bash, "set -eo pipefail\n")
            script = self.ctl / f"block{self.count}.sh"
            script.write_text(block.code)
            self._send(self.bash, f"source {shlex.quote(str(script))} >{shlex.quote(str(out))} 2>&1 </dev/null; "
                                  f"printf '__SDM_BLOCK_DONE__ %s\\n' \"$?\"\n")
            proc = self.bash
            marker = "__SDM_BLOCK_DONE__"
        else:
            if self.python is None:
                self.python = self._start([sys.executable, "-u", "-c", _PY_WORKER])
            self._send(self.python, json.dumps({"code": block.code, "out": str(out), "name": block.where}) + "\n")
            proc = self.python
            marker = '{"ok"'
        line = _readline(proc, self.timeout)
        seconds = time.monotonic() - start
        text = out.read_text(errors="replace") if out.exists() else ""
        if line is None:
            why = f"did not end within {self.timeout:.0f} s" if proc.poll() is None else "failed (a command exited non-zero)"
            if block.lang == "bash":
                self.bash = None if proc.poll() is not None else self.bash
            raise BlockFailed(f"{block.where}: the {block.lang} block {why}; it printed:\n{text}")
        ok = line.startswith(marker) and (line.split()[-1] == "0" if block.lang == "bash" else json.loads(line)["ok"])
        if not ok:
            raise BlockFailed(f"{block.where}: the {block.lang} block failed; it printed:\n{text}")
        if block.expected is not None and not matches(block.expected.code, text):
            raise BlockFailed(f"{block.where}: the {block.lang} block printed\n{text}\n"
                              f"which is not what {block.expected.where} says:\n{block.expected.code}")
        return Result(block, text, seconds)


def run_page(page: Page, work: Path, env: dict[str, str], timeout: float = 180.0) -> list[Result]:
    """Every runnable block of *page* in order; raises :class:`BlockFailed` at the first that fails."""
    lay_out(work)
    results = []
    with PageRun(page, work, env, timeout) as runner:
        for block in page.runnable:
            results.append(runner.run(block))
    return results


def pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def main(argv: list[str]) -> int:
    for name in argv or [str(p) for p in pages()]:
        page = parse(Path(name).resolve())
        for p in problems(page):
            print("convention:", p)
        with tempfile.TemporaryDirectory(prefix="sdm-page-") as tmp:
            work = Path(tmp) / "work"
            (Path(tmp) / "home").mkdir()
            try:
                for r in run_page(page, work, environment(Path(tmp) / "home")):
                    print(f"---- {r.block.where} ({r.block.lang}{', ' + r.block.file if r.block.file else ''}, "
                          f"{r.seconds:.1f} s)\n{r.output}", end="")
            except BlockFailed as exc:
                print(exc)
                return 1
        for b in page.not_run:
            print(f"not run: {b.where}: {b.not_run}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
