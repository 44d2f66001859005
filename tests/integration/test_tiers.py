"""Migrate, stage and purge (``sdm.storage.tiers``) between the file system and a real S3 server (versitygw).

A run is written through SDM on one process; its files are migrated to the object store,
their objects compared byte for byte with the files and their digests recomputed with
hashlib; the fast copies purged, staged back, and every step read with ``verify=True``
against numpy references.  Refusals (no verified copy elsewhere, a damaged file, a
damaged object) name what is wrong and change nothing.
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import sdm
from sdm.catalog import Catalog
from sdm.catalog import tiers as rows
from sdm.errors import IntegrityError, RunStateError
from sdm.storage import tiers
from sdm.storage.backends.objectstore import ObjectStore

SHAPE = (16, 12)
STEPS = [0, 1, 2]


def field(name: str, step: int) -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype="<f8").reshape(SHAPE) * (1 + step) + 1000 * len(name)


@pytest.fixture
def store(s3_server) -> Iterator[ObjectStore]:
    made = ObjectStore(f"s3://sdm-tiers/t-{uuid.uuid4().hex[:8]}", endpoint=s3_server.endpoint)
    made.ensure_bucket()
    yield made


def write_run(root: Path, url: str) -> int:
    with sdm.open("tiers", root=str(root), catalog=url) as s:
        three = s.make_group("fields", ["T", "P"], dtype="<f8", shape=SHAPE, level=3)
        one = s.make_group("snap", ["Q"], dtype="<f8", shape=SHAPE, level=1)
        for step in STEPS:
            three.write_step(step, {"T": field("T", step), "P": field("P", step)})
            one.write("Q", step, field("Q", step))
        return s.run_id


def read_all(root: Path, url: str, run_id: int) -> int:
    count = 0
    with sdm.open("tiers", "r", root=str(root), catalog=url, run=run_id) as s:
        for group, names in (("fields", ["T", "P"]), ("snap", ["Q"])):
            for name in names:
                for step in STEPS:
                    np.testing.assert_array_equal(s.group(group).read(name, step, verify=True), field(name, step))
                    count += 1
    return count


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, str, int]:
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    return root, url, write_run(root, url)


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.sdm"))}


def test_migrate_purge_stage_round_trip(run, store: ObjectStore) -> None:
    root, url, run_id = run
    original = files_of(root)
    cat = Catalog(url)
    try:
        report = tiers.migrate(cat, run_id, store)
        assert (report.files, report.nbytes, report.skipped) == (len(original), sum(map(len, original.values())), 0)
        for path, data in original.items():  # every object is its file, byte for byte
            assert store.get(path) == data
        copies = rows.copies(cat, run_id)
        assert set(copies) == set(original)
        for path, found in copies.items():
            digest = "sha256:" + hashlib.sha256(original[path]).hexdigest()
            assert [(c.tier, c.location, c.size, c.checksum, c.state) for c in found] == [
                ("archive", store.location(path), len(original[path]), digest, "verified"),
                ("fast", path, len(original[path]), digest, "verified")]
        again = tiers.migrate(cat, run_id, store)  # idempotent: nothing left to do
        assert (again.files, again.skipped) == (0, len(original))

        purged = tiers.purge(cat, run_id, "fast")
        assert (purged.files, purged.nbytes) == (len(original), sum(map(len, original.values())))
        assert files_of(root) == {}
        assert {c.tier for found in rows.copies(cat, run_id).values() for c in found} == {"archive"}

        staged = tiers.stage(cat, run_id, store)
        assert staged.files == len(original)
        assert files_of(root) == original
        log = tiers_log(cat, run_id)
        assert log == [("migrate", "archive", len(original), "ok"), ("migrate", "archive", 0, "ok"),
                       ("purge", "fast", len(original), "ok"), ("stage", "fast", len(original), "ok")]
    finally:
        cat.close()
    assert read_all(root, url, run_id) == 9


def tiers_log(cat: Catalog, run_id: int) -> list[tuple[str, str, int, str | None]]:
    return [(o.operation, o.tier, o.files, o.outcome) for o in rows.operations(cat, run_id)]


def test_purge_without_a_verified_copy_elsewhere_is_refused(run, store: ObjectStore) -> None:
    root, url, run_id = run
    original = files_of(root)
    cat = Catalog(url)
    try:
        with pytest.raises(RunStateError) as err:
            tiers.purge(cat, run_id, "fast")
        assert str(err.value).startswith(
            f"purge of run {run_id} from the fast tier refused: {len(original)} of its files have no verified copy on "
            f"the archive tier (")
        assert str(err.value).endswith(f"`sdm migrate {run_id}` first")
        nothing = tiers.purge(cat, run_id, "archive", store)  # nothing archived: nothing to remove, nothing refused
        assert (nothing.files, nothing.skipped) == (0, len(original))
        assert files_of(root) == original and store.list() == []
        assert tiers_log(cat, run_id) == [("purge", "fast", 0, "failed"), ("purge", "archive", 0, "ok")]
    finally:
        cat.close()


def test_a_damaged_file_is_never_archived(run, store: ObjectStore) -> None:
    root, url, run_id = run
    (level3,) = [p for p in root.rglob("fields.sdm")]
    raw = bytearray(level3.read_bytes())
    raw[100] ^= 0x04
    level3.write_bytes(bytes(raw))
    cat = Catalog(url)
    try:
        with pytest.raises(IntegrityError) as err:
            tiers.migrate(cat, run_id, store)
        assert str(err.value).startswith(f"{level3} does not hold what run {run_id}'s catalog says: fields/T step 0: "
                                         "checksum ")
        archived = {c.path for found in rows.copies(cat, run_id).values() for c in found if c.tier == "archive"}
        assert str(level3.relative_to(root)) not in archived
        assert store.head(str(level3.relative_to(root))) is None
    finally:
        cat.close()


def test_a_damaged_object_is_never_staged(run, store: ObjectStore) -> None:
    root, url, run_id = run
    original = files_of(root)
    cat = Catalog(url)
    try:
        tiers.migrate(cat, run_id, store)
        tiers.purge(cat, run_id, "fast")
        path = next(iter(original))
        bad = bytearray(original[path])
        bad[0] ^= 0x01
        store.put(path, bytes(bad))  # changed in the object store behind SDM's back
        with pytest.raises(IntegrityError) as err:
            tiers.stage(cat, run_id, store)
        assert str(err.value) == (f"{store.location(path)} does not match its recorded digest "
                                  f"sha256:{hashlib.sha256(original[path]).hexdigest()}; it was changed or damaged in "
                                  "the object store")
        assert not (root / path).exists() and not list(root.rglob("*.staging"))
        store.put(path, original[path])  # repaired: a rerun completes
        tiers.stage(cat, run_id, store)
        assert files_of(root) == original
    finally:
        cat.close()
    assert read_all(root, url, run_id) == 9


def test_purge_of_the_archive_keeps_the_files(run, store: ObjectStore) -> None:
    root, url, run_id = run
    original = files_of(root)
    cat = Catalog(url)
    try:
        tiers.migrate(cat, run_id, store)
        report = tiers.purge(cat, run_id, "archive", store)
        assert report.files == len(original) and store.list() == []
        assert {c.tier for found in rows.copies(cat, run_id).values() for c in found} == {"fast"}
        assert files_of(root) == original
    finally:
        cat.close()
