"""sdm.storage.failures: which failures are a full file system, and what the error then says.

The file system asked is this machine's real one (``os.statvfs`` of ``tmp_path``); the
disk-full paths themselves are exercised on a real full tmpfs by
tests/integration/test_disk_full.py.
"""

from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import pytest

from sdm.errors import CatalogError, CatalogUnavailableError, StorageError
from sdm.storage.failures import no_space, storage_error
from sdm.storage.mounts import free_bytes


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_free_bytes_asks_the_nearest_existing_parent(tmp_path: Path) -> None:
    got = free_bytes(tmp_path / "not" / "made" / "yet.sdm")
    assert got is not None and abs(got - _free(tmp_path)) < 64 << 20  # the same file system (others write meanwhile)
    assert not (tmp_path / "not").exists()


def test_enospc_from_the_system_gets_the_full_disk_message(tmp_path: Path) -> None:
    err = storage_error(OSError(errno.ENOSPC, "No space left on device"), f"cannot write subfile {tmp_path}/a.sdm",
                        tmp_path / "a.sdm", needed=4096)
    assert isinstance(err, StorageError) and err.errno == errno.ENOSPC
    msg = str(err)
    assert msg.startswith(f"cannot write subfile {tmp_path}/a.sdm: no space left on the file system holding ")
    assert "4096 bytes needed, " in msg and " bytes free)" in msg and "root= or SDM_ROOT" in msg


def test_a_generic_error_with_room_to_spare_keeps_its_errno(tmp_path: Path) -> None:
    err = storage_error(OSError(errno.EIO, "Input/output error"), "MPI-IO write of x", tmp_path / "x", needed=1)
    assert (err.errno, str(err)) == (errno.EIO, "MPI-IO write of x: Input/output error")


def test_a_generic_error_needing_more_than_is_free_is_enospc(tmp_path: Path) -> None:
    needed = _free(tmp_path) + (1 << 50)  # more than any disk here holds
    err = storage_error(OSError(errno.EIO, "Input/output error"), "MPI-IO write of x", tmp_path / "x", needed=needed)
    assert err.errno == errno.ENOSPC and f"({needed} bytes needed, " in str(err)


def test_a_generic_error_of_an_operation_that_writes_nothing_is_never_enospc(tmp_path: Path) -> None:
    err = storage_error(OSError(errno.EIO, "Input/output error"), "MPI-IO read of x", tmp_path / "x")
    assert err.errno == errno.EIO


@pytest.mark.parametrize("number", [errno.EACCES, errno.ENOENT, errno.EROFS])
def test_specific_errors_stay_what_they_are_even_when_much_is_needed(tmp_path: Path, number: int) -> None:
    err = storage_error(OSError(number, os.strerror(number)), "cannot open x", tmp_path / "x", needed=1 << 62)
    assert (err.errno, str(err)) == (number, f"cannot open x: {os.strerror(number)}")


def test_no_space_without_a_known_need_says_what_is_free(tmp_path: Path) -> None:
    msg = str(no_space("sync of x failed", tmp_path / "x", 0, free=12))
    assert "(12 bytes free)" in msg and "needed" not in msg


@pytest.mark.parametrize("cls", [CatalogError, CatalogUnavailableError])
def test_catalog_errors_carry_their_errno_between_ranks(cls: type[CatalogError]) -> None:
    got = pickle.loads(pickle.dumps(cls("the disk is full", errno=errno.ENOSPC)))
    assert type(got) is cls and got.errno == errno.ENOSPC and str(got) == "the disk is full"
    assert cls("other").errno is None
