"""The catalog's record of copies per tier and of tier operations (schema 0008), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from sdm.catalog import Catalog
from sdm.catalog import tiers
from sdm.errors import InvalidArgumentError, NotFoundError


@pytest.fixture
def cat(catalog_url: str):
    c = Catalog(catalog_url)
    yield c
    c.close()


def _run_with_files(cat: Catalog) -> int:
    run = cat.create_run("app", nprocs=1, root="/data")
    cat.reserve(run, [("app/r/g.sdm", 3, 1000, False), ("app/r/h.sdm", 3, 24, False)])
    return run


def test_a_file_never_migrated_has_its_implicit_fast_copy(cat: Catalog) -> None:
    run = _run_with_files(cat)
    got = tiers.copies(cat, run)
    assert got == {"app/r/g.sdm": [tiers.Copy("app/r/g.sdm", "fast", "app/r/g.sdm", 1000, None, "verified", None, True)],
                   "app/r/h.sdm": [tiers.Copy("app/r/h.sdm", "fast", "app/r/h.sdm", 24, None, "verified", None, True)]}


def test_copies_are_recorded_replaced_and_dropped(cat: Catalog) -> None:
    run = _run_with_files(cat)
    when = datetime(2026, 11, 25, 8, 0, tzinfo=timezone.utc)
    tiers.put_copy(cat, run, "app/r/g.sdm", "fast", location="app/r/g.sdm", size=1000, state="verified",
                   verified_at=when)
    tiers.put_copy(cat, run, "app/r/g.sdm", "archive", location="s3://b/app/r/g.sdm", size=1000)
    got = tiers.copies(cat, run)["app/r/g.sdm"]
    assert [(c.tier, c.state, c.verified, c.implicit) for c in got] == [("archive", "copying", False, False),
                                                                      ("fast", "verified", True, False)]
    tiers.put_copy(cat, run, "app/r/g.sdm", "archive", location="s3://b/app/r/g.sdm", size=1000,
                   checksum="sha256:ab", state="verified", verified_at=when)
    (archive,) = [c for c in tiers.copies(cat, run)["app/r/g.sdm"] if c.tier == "archive"]
    assert (archive.checksum, archive.state, archive.verified_at) == ("sha256:ab", "verified", when)
    tiers.drop_copy(cat, run, "app/r/g.sdm", "fast")
    assert [c.tier for c in tiers.copies(cat, run)["app/r/g.sdm"]] == ["archive"]
    assert tiers.copies(cat, run)["app/r/h.sdm"][0].implicit  # the other file is untouched


def test_bad_input_changes_nothing(cat: Catalog) -> None:
    run = _run_with_files(cat)
    before = tiers.copies(cat, run)
    with pytest.raises(InvalidArgumentError) as err:
        tiers.put_copy(cat, run, "app/r/g.sdm", "tape", location="x", size=1)
    assert str(err.value) == "storage tier must be one of fast, archive, got 'tape'"
    with pytest.raises(InvalidArgumentError) as err:
        tiers.put_copy(cat, run, "app/r/g.sdm", "archive", location="x", size=1, state="done")
    assert str(err.value) == "copy state must be one of copying, verified, got 'done'"
    with pytest.raises(NotFoundError) as err:
        tiers.put_copy(cat, run, "app/r/nope.sdm", "archive", location="x", size=1)
    assert str(err.value) == f"run {run} has no data file 'app/r/nope.sdm'"
    with pytest.raises(InvalidArgumentError) as err:
        tiers.start_operation(cat, run, "copy", "archive")
    assert str(err.value) == "tier operation must be migrate, stage or purge, got 'copy'"
    assert tiers.copies(cat, run) == before and tiers.operations(cat) == []


def test_operations_are_logged(cat: Catalog) -> None:
    run = _run_with_files(cat)
    first = tiers.start_operation(cat, run, "migrate", "archive")
    tiers.finish_operation(cat, first, files=2, nbytes=1024, seconds=0.5, outcome="ok")
    second = tiers.start_operation(cat, run, "purge", "fast")
    (done, running) = tiers.operations(cat, run)
    assert (done.id, done.operation, done.tier, done.files, done.nbytes, done.seconds, done.outcome) == \
        (first, "migrate", "archive", 2, 1024, 0.5, "ok")
    assert done.finished_at is not None and done.finished_at >= done.started_at and "@" in done.who
    assert (running.id, running.finished_at, running.outcome) == (second, None, None)
    assert tiers.operations(cat, run + 1) == []
