"""The storage seam: both backends answer the same calls alike (a directory through MPI-IO, versitygw's S3)."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from sdm.errors import StorageError
from sdm.io import method_names
from sdm.storage.backends.base import Backend, CollectiveHandle, FileHandle
from sdm.storage.backends.mpiio import MPIFileHandle, MPIIOBackend
from sdm.storage.backends.objectstore import ObjectHandle, ObjectStore


@pytest.fixture(params=["mpiio", "objectstore"])
def backend(request, tmp_path: Path) -> tuple[Backend, str]:
    """A backend and the key prefix its keys go under."""
    if request.param == "mpiio":
        files = MPIIOBackend(MPI.COMM_SELF, writable=True)
        yield files, str(tmp_path)
        files.close_all()
    else:
        server = request.getfixturevalue("s3_server")
        store = ObjectStore(f"s3://sdm-seam/{uuid.uuid4().hex[:8]}", endpoint=server.endpoint)
        store.ensure_bucket()
        yield store, "d"


def test_both_backends_write_read_list_and_delete_alike(backend: tuple[Backend, str]) -> None:
    b, prefix = backend
    data = np.arange(1000, dtype="<i4").tobytes()
    key = f"{prefix}/a.bin"
    assert b.size(key) is None
    b.write(key, data)
    b.sync(key)
    assert b.size(key) == len(data)
    assert b.read(key, [(4, 8), (3996, 100), (0, 0)]) == [data[4:12], data[3996:], b""]  # short at the end
    b.write(f"{prefix}/b.bin", b"xyz")
    assert [(Path(k).name, n) for k, n in b.list(prefix)] == [("a.bin", len(data)), ("b.bin", 3)]
    b.delete(key)
    b.delete(key)  # nothing there: no error
    assert b.size(key) is None and [Path(k).name for k, _ in b.list(prefix)] == ["b.bin"]


def test_what_each_backend_declares(backend: tuple[Backend, str]) -> None:
    b, prefix = backend
    handle = b.open(f"{prefix}/c.bin")
    try:
        if b.name == "mpiio":
            assert (b.tier, b.partial_writes, b.collective_io) == ("fast", True, True)
            assert isinstance(handle, MPIFileHandle) and isinstance(handle, CollectiveHandle)
            assert isinstance(handle.file, MPI.File) and handle.backend is b
            assert "collective" in method_names("mpiio") and not any(m.startswith("remote-")
                                                                      for m in method_names("mpiio"))
        else:
            assert (b.tier, b.partial_writes, b.collective_io) == ("archive", False, False)
            assert isinstance(handle, ObjectHandle) and handle.location.endswith("/d/c.bin")
            assert isinstance(handle, FileHandle) and not isinstance(handle, CollectiveHandle)
            assert method_names("objectstore") == ["remote-collective", "remote-naive", "remote-sieving",
                                                   "remote-subfile", "remote-superfile"]
    finally:
        b.release(f"{prefix}/c.bin", handle)


def test_an_object_cannot_be_written_in_part(s3_server) -> None:
    store = ObjectStore(f"s3://sdm-seam/{uuid.uuid4().hex[:8]}", endpoint=s3_server.endpoint)
    store.ensure_bucket()
    store.write("x", b"abc")
    with pytest.raises(StorageError) as err:
        store.write("x", b"d", offset=1)
    assert str(err.value) == (f"PUT {store.location('x')}: an object cannot be updated in part (offset 1); "
                              "it is written whole")
    assert store.get("x") == b"abc"  # unchanged


def test_a_multipart_upload_from_parts_is_whole_or_absent(s3_server) -> None:
    """Parts uploaded separately make the object only on completion; an aborted upload leaves nothing."""
    store = ObjectStore(f"s3://sdm-seam/{uuid.uuid4().hex[:8]}", endpoint=s3_server.endpoint)
    store.ensure_bucket()
    parts = [bytes([i]) * (5 << 20) for i in range(2)] + [b"tail"]
    upload = store.start_upload("whole")
    etags = [store.put_part("whole", upload, i + 1, p) for i, p in enumerate(parts)]
    assert store.head("whole") is None  # not there before it is completed
    store.finish_upload("whole", upload, etags)
    assert store.get("whole") == b"".join(parts)
    aborted = store.start_upload("gone")
    store.put_part("gone", aborted, 1, parts[0])
    store.abort_upload("gone", aborted)
    assert store.head("gone") is None
    with pytest.raises(StorageError) as err:  # a part of an upload that no longer exists
        store.put_part("gone", aborted, 2, b"x")
    assert str(err.value) == f"PUT {store.location('gone')} failed: HTTP 404"
