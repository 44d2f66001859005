"""``sdm.storage.confine``: which recorded paths and archive locations lie inside their run, on a real directory tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdm.errors import IntegrityError
from sdm.storage.confine import confine, confine_location, escapes, location_escapes, row_record, run_directory

RUN = "app/run-000002-20260101T000000Z-abcdef012345"
OTHER = "app/run-000001-20260101T000000Z-0123456789ab"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    base = tmp_path / "root"
    for d in (RUN, OTHER):
        (base / d).mkdir(parents=True)
        (base / d / "fields.sdm").write_bytes(b"x" * 10)
    (base / "catalog.db").write_bytes(b"db")
    (tmp_path / "outside").write_bytes(b"secret")
    return base


def test_a_file_of_the_run_is_accepted(root: Path) -> None:
    assert confine(root, RUN, f"{RUN}/fields.sdm", "r") == (root / RUN / "fields.sdm").resolve()
    assert confine(root, RUN, f"{RUN}/not-yet-written.sdm", "r") == (root / RUN / "not-yet-written.sdm").resolve()
    assert escapes(root, RUN, f"{RUN}/sub/dir/f.sdm") is None  # a subdirectory of the run is the run's


@pytest.mark.parametrize(("rel", "why"), [
    ("", "is empty"),
    ("  ", "is empty"),
    (f"{RUN}/a\0b", "contains a NUL character"),
    ("/etc/passwd", "is absolute"),
    (f"{RUN}/../../../outside", "leads out of its directory through '..'"),
    (f"{RUN}/x/../fields.sdm", "leads out of its directory through '..'"),  # even when it comes back
    (f"{OTHER}/fields.sdm", "resolves to {root}/" + OTHER + "/fields.sdm, outside the run's directory {root}/" + RUN),
    ("catalog.db", "resolves to {root}/catalog.db, outside the run's directory {root}/" + RUN),
    (RUN, "resolves to {root}/" + RUN + ", outside the run's directory {root}/" + RUN),  # the directory itself
    (None, "is a NoneType, not a path"),
])
def test_paths_outside_the_run_are_refused(root: Path, rel: object, why: str) -> None:
    root = root.resolve()
    assert escapes(root, RUN, rel) == why.format(root=root)
    with pytest.raises(IntegrityError) as err:
        confine(root, RUN, rel, row_record(2, "fields", "T", 3, 1))
    assert str(err.value) == (
        f"run 2's catalog row of dataset fields/T step 3 (extent 1) names the path {rel!r}, which "
        f"{why.format(root=root)}; SDM reads, writes and deletes only files inside a run's own directory, so the "
        "record is refused (it was changed or crafted: restore the catalog with `sdm rebuild` from intact "
        "meta-files, or remove the record)")


def test_links_in_the_run_are_refused_wherever_they_lead(root: Path) -> None:
    root = root.resolve()
    run = root / RUN
    (run / "out.sdm").symlink_to(root.parent / "outside")
    (run / "other.sdm").symlink_to(root / OTHER / "fields.sdm")
    (run / "same.sdm").symlink_to(run / "fields.sdm")  # inside, yet a deletion through it would hit fields.sdm
    (run / "dir").symlink_to(root / OTHER)
    assert escapes(root, RUN, f"{RUN}/out.sdm") == (
        f"resolves through the symbolic link {run}/out.sdm to {root.parent}/outside, outside the run's directory {run}")
    assert escapes(root, RUN, f"{RUN}/dir/fields.sdm") == (
        f"resolves through the symbolic link {run}/dir to {root}/{OTHER}/fields.sdm, outside the run's directory {run}")
    assert "outside the run's directory" in str(escapes(root, RUN, f"{RUN}/other.sdm"))
    assert escapes(root, RUN, f"{RUN}/same.sdm") == (
        f"passes through the symbolic link {run}/same.sdm inside the run's directory (to {run}/fields.sdm); SDM never "
        "makes links there, and would delete or cut the file it leads to")


def test_links_above_the_run_are_followed(root: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(root)  # a data root reached through a link is still the root
    assert confine(tmp_path / "alias", RUN, f"{RUN}/fields.sdm", "r") == (root / RUN / "fields.sdm").resolve()


@pytest.mark.parametrize("rel_dir", ["../elsewhere", "/abs", "", "app/../.."])
def test_a_run_directory_outside_the_root_is_refused(root: Path, rel_dir: str) -> None:
    with pytest.raises(IntegrityError, match=f"^the run directory {rel_dir!r} "):
        run_directory(root, rel_dir)


ARCHIVE = "s3://bucket/prefix"


@pytest.mark.parametrize(("location", "archive", "why"), [
    (f"{ARCHIVE}/{RUN}/fields.sdm", None, None),
    (f"{ARCHIVE}/{RUN}/fields.sdm", ARCHIVE, None),
    (f"{ARCHIVE}/{RUN}/superfile-0a1b.sdmpack@4096", None, None),
    (f"{ARCHIVE}/{RUN}/superfile-0a1b.sdmpack@4096", ARCHIVE, None),
    (f"{ARCHIVE}/{OTHER}/fields.sdm", None, f"is not the object of the file '{RUN}/fields.sdm' (<archive>/{RUN}/fields.sdm)"),
    (f"{ARCHIVE}/{OTHER}/superfile-0a1b.sdmpack@0", None,
     f"is not a superfile of the run's directory (<archive>/{RUN}/<name>.sdmpack)"),
    (f"{ARCHIVE}/{RUN}/fields.sdm@0", None, f"is not a superfile of the run's directory (<archive>/{RUN}/<name>.sdmpack)"),
    (f"s3://other/x/{RUN}/fields.sdm", ARCHIVE, "is not in the archive s3://bucket/prefix"),
    (f"s3://other/x/{RUN}/superfile-1.sdmpack@0", ARCHIVE, "is not in the archive s3://bucket/prefix"),
    (f"{ARCHIVE}/{RUN}/../{RUN}/fields.sdm", None, "has an empty, '.' or '..' segment"),
    (f"{ARCHIVE}//{RUN}/fields.sdm", None, "has an empty, '.' or '..' segment"),
    (f"/tmp/{RUN}/fields.sdm", None, "is not an s3:// location"),
])
def test_archive_locations_lie_under_the_run_prefix(location: str, archive: str | None, why: str | None) -> None:
    path = f"{RUN}/fields.sdm"
    assert location_escapes(location, RUN, path, archive) == why
    if why is None:
        assert confine_location(location, RUN, path, "r", archive) == location
    else:
        with pytest.raises(IntegrityError) as err:
            confine_location(location, RUN, path, "record", archive)
        assert str(err.value) == (f"record names the archive copy {location!r} of {path!r}, which {why}; SDM reads and "
                                  "deletes only objects under a run's own archive prefix, so the record is refused")
