"""Property-based fuzzing (Hypothesis) of what runs without mpiexec: the ``sdm`` command,
the data views' constructors and pieces, dataset definitions and hint parsing.

Each call either works (and its result is checked against numpy) or raises a specific
:class:`sdm.SDMError` subclass -- never ``SDMError`` itself, never
:class:`sdm.InternalError`, never another exception. The command line never prints a
traceback: one ``error: ...`` line and status 1, or a usage error with status 2, and the
catalog file is left byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import sdm
from sdm.engine import hints as engine_hints
from sdm._cli.main import app
from sdm.catalog import Catalog, DatasetSpec
from sdm.errors import InternalError, SDMError
from sdm.group import Dataset
from sdm.planner.hints import Hints

EXAMPLES = int(os.environ.get("SDM_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck), print_blob=False)
CALLS = {"generated": 0}

pytestmark = pytest.mark.timeout(300)


class _Summary:
    def pytest_terminal_summary(self, terminalreporter):
        if CALLS["generated"]:
            terminalreporter.write_line(f"fuzz (tests/unit): {CALLS['generated']} generated calls")


@pytest.fixture(scope="module", autouse=True)
def report(request):
    if not request.config.pluginmanager.has_plugin("sdm-fuzz-unit"):
        request.config.pluginmanager.register(_Summary(), "sdm-fuzz-unit")
    yield


def outcome(fn):
    """("ok", value) or ("err", exception); fails on anything but a specific SDMError."""
    CALLS["generated"] += 1
    try:
        return "ok", fn()
    except SDMError as exc:
        assert type(exc) not in (SDMError, InternalError), f"not a specific error: {type(exc).__name__}: {exc}"
        assert str(exc), "an error without a message"
        return "err", exc
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"raw {type(exc).__name__} escaped: {exc}")


# ------------------------------------------------------------------------------ CLI
@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-fuzz")
    url = f"sqlite:///{root}/catalog.db"
    cat = Catalog(url)
    run = cat.create_run("A", nprocs=2, root=str(root), attributes={"n": 64, "model": "x", "ok": True})
    g = cat.define_group(run, "g", 3, [DatasetSpec("rho", "<f8", (4, 4), "C")])
    cat.record_write(run_id=run, dataset_id=g.datasets[0].id, step=0, path="A/g.sdm", level=3, offset=0, nbytes=128,
                     checksum="0" * 16, checksum_algo="sum64", method="posix", seconds=0.1, nprocs=2, overwrite=False)
    cat.close()
    return url, root / "catalog.db"


WORDS = st.sampled_from([
    "1", "0", "-5", "99999999999999999999999", "2", "abc", "", " ", "1.5", "--json", "--writes", "A", "nope",
    "n=64", "n>=1", "n<1e999", "n=nan", "model!=x", "ok=true", "res", "=", "n==1", "n=\x01", "a" * 300,
    "n=99999999999999999999999999", "--since", "--until", "2024-01-01", "2024-13-45", "yesterday", "--app",
    "--run", "--problem", "--no-such-option", "-c",
])
COMMANDS = st.sampled_from(["ls", "show", "find", "histories", "frobnicate", "--version"])
URLS = st.sampled_from(["good", "good", "good", "", "sqlite://", "postgresql://nobody@127.0.0.1:1/x", "mysql://x/y",
                        "not a url", "sqlite:////nonexistent/dir/c.db", "::::"])


@FUZZ
@given(command=COMMANDS, words=st.lists(WORDS, max_size=4), url=URLS)
def test_fuzz_cli(catalog, command, words, url):
    good, path = catalog
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    args = [command, *words, "--catalog", good if url == "good" else url]
    CALLS["generated"] += 1
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200", "SDM_CATALOG": None, "SDM_ROOT": str(path.parent)})
    out = result.stdout + result.stderr
    assert "Traceback" not in out, (args, out)
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, out)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (args, result.exception)
    if result.exit_code == 1:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.stderr)
        assert "internal error" not in lines[0], (args, lines[0])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before, args


# --------------------------------------------------------------------------- layout
INTS = st.one_of(st.integers(-3, 8), st.sampled_from([10**6, 2**70, np.int64(2), np.int32(1), True, 1.5, "2", None]))
SEQ = st.one_of(st.lists(INTS, max_size=4).map(tuple), st.sampled_from(["22", 4, None, np.array([2, 1]), [(1, 1)]]))
SHAPES = st.lists(st.integers(0, 9), min_size=1, max_size=3).map(tuple)


def _build(kind, a, b, c):
    if kind == "block":
        return sdm.Block(grid=a, ghosts=c)
    if kind == "cyclic":
        return sdm.Cyclic(grid=a)
    if kind == "block_cyclic":
        return sdm.BlockCyclic(grid=a, blocks=b if b is not None else 1)
    if kind == "subarray":
        return sdm.Subarray(a, b, ghosts=c)
    return sdm.MapArray(a if a is not None else [], ghost=b, coverage=c if isinstance(c, bool) else True)


@FUZZ
@given(kind=st.sampled_from(["block", "cyclic", "block_cyclic", "subarray", "map"]),
       a=st.one_of(SEQ, st.none()), b=st.one_of(SEQ, INTS), c=st.one_of(INTS, SEQ),
       shape=SHAPES, nprocs=st.integers(1, 5), data=st.data())
def test_fuzz_views(kind, a, b, c, shape, nprocs, data):
    kind_, view = outcome(lambda: _build(kind, a, b, c))
    if kind_ != "ok":
        return
    rank = data.draw(st.integers(0, nprocs - 1))
    res, piece = outcome(lambda: view.piece(shape, nprocs, rank))
    if res != "ok":
        return
    # the piece is inside the array, its ghosts are bounded, and its memory shape follows
    assert len(piece.counts) == len(shape)
    for idx, n in zip(piece.indices, shape):
        assert idx.size == 0 or (0 <= idx.min() and idx.max() < n and np.all(np.diff(idx) > 0))
    if piece.kind != "map":
        assert all(lo <= max(n, 1) and hi <= max(n, 1) for (lo, hi), n in zip(piece.ghosts, shape))
        assert np.zeros(piece.memory_shape)[piece.interior].shape == piece.counts


@FUZZ
@given(kind=st.sampled_from(["block", "cyclic", "block_cyclic"]), shape=SHAPES, nprocs=st.integers(1, 6),
       blocks=st.integers(1, 4))
def test_fuzz_grid_views_tile_the_array(kind, shape, nprocs, blocks):
    """Valid grid views: the pieces of all ranks own every element exactly once."""
    view = {"block": sdm.Block(), "cyclic": sdm.Cyclic(), "block_cyclic": sdm.BlockCyclic(blocks=blocks)}[kind]
    owned = np.zeros(shape, dtype=np.int64)
    for rank in range(nprocs):
        res, piece = outcome(lambda: view.piece(shape, nprocs, rank))
        assert res == "ok"
        owned[np.ix_(*piece.indices)] += 1
    assert (owned == 1).all()


# ------------------------------------------------------------ definitions and hints
@FUZZ
@given(name=st.sampled_from(["a", "", "a/b", 3, None, "x" * 300, "ok name"]),
       shape=st.one_of(SEQ, INTS, st.sampled_from(["44", (2**40, 2**40), [3, 4]])),
       dtype=st.sampled_from(["<f8", "i4", ">u2", "c16", "b1", None, "nope", object, 5]),
       order=st.sampled_from(["C", "F", "c", None, 1]))
def test_fuzz_dataset_definitions(name, shape, dtype, order):
    res, spec = outcome(lambda: Dataset(name, shape=shape, dtype=dtype, order=order).spec(dtype=None, shape=None, order="C"))
    if res == "ok":
        want = (shape,) if np.ndim(shape) == 0 else shape
        assert spec.shape == tuple(int(x) for x in want) and spec.dtype == np.dtype(dtype).str and spec.order == order
        assert not isinstance(shape, str)


HINT_VALUES = st.one_of(st.sampled_from(["1", "4m", "lots", "-1", "", "node", "every_rank", "enable", "x", "0",
                                         "99999999999999999999999", "64k"]), st.integers(-2, 5), st.none())
HINT_KEYS = st.sampled_from(["cb_nodes", "cb_buffer_size", "sdm_sync", "sdm_io_servers", "sdm_buffer_size",
                             "sdm_sieve_gap", "sdm_shm", "romio_ds_read", "sdm_sieve_consistency", "striping_unit", "",
                             1])


@FUZZ
@given(hints=st.one_of(st.dictionaries(HINT_KEYS, HINT_VALUES, max_size=3), st.sampled_from(["abc", [1], 5])),
       planner=st.one_of(st.dictionaries(st.sampled_from(["pattern", "frequency", "mostly", "buffer_limit", "methods",
                                                          "trials", 7]),
                                         st.sampled_from(["(Block, *)", "2", "-1", "nan", "read", "often", "posix,list",
                                                          "magic", 3, 2.5, None, True, [1], ["posix"]]), max_size=3),
                         st.sampled_from(["x", [1]])))
def test_fuzz_hints(hints, planner):
    res, parsed = outcome(lambda: engine_hints.session_hints(hints))
    if res == "ok":
        assert parsed == hints and all(isinstance(k, str) and isinstance(v, str) for k, v in hints.items())
    res, parsed = outcome(lambda: engine_hints.planner_hints(planner))
    if res == "ok":
        Hints.parse(parsed)  # parses again, the same way
