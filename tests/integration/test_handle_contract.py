"""The storage seam's contract, run alike over both backends' handles (real MPI-IO files, versitygw's S3).

Every expected value is built here with numpy and Python slices, never by SDM.
"""

from __future__ import annotations

import hashlib
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from mpi4py import MPI

from sdm.errors import StorageError
from sdm.io.base import make_transfer
from sdm.storage.backends.base import Backend, CollectiveHandle, FileHandle
from sdm.storage.backends.mpiio import MPIFileHandle, MPIIOBackend
from sdm.storage.backends.objectstore import MIN_PART_SIZE, ObjectHandle, ObjectStore
from sdm.storage.backends.posix import PosixFiles

pytestmark = pytest.mark.timeout(300)

DATA = np.arange(50_000, dtype="<u4").tobytes()  # 200 000 bytes, every 4-byte word different


@contextmanager
def _backend(kind: str, request, tmp_path: Path) -> Iterator[tuple[Backend, str]]:
    """A backend of *kind* and a key prefix its keys go under."""
    if kind in ("mpiio", "posix"):
        files = MPIIOBackend(MPI.COMM_SELF, writable=True) if kind == "mpiio" else PosixFiles()
        try:
            yield files, str(tmp_path)
        finally:
            files.close_all()
    else:
        server = request.getfixturevalue("s3_server")
        store = ObjectStore(f"s3://sdm-contract/{uuid.uuid4().hex[:8]}", endpoint=server.endpoint)
        store.ensure_bucket()
        yield store, "k"


@pytest.fixture(params=["mpiio", "objectstore"])
def seam(request, tmp_path: Path) -> Iterator[tuple[Backend, str]]:
    """The two backends of the seam: their handles, and their independent calls."""
    with _backend(request.param, request, tmp_path) as made:
        yield made


@pytest.fixture(params=["mpiio", "posix", "objectstore"])
def anywhere(request, tmp_path: Path) -> Iterator[tuple[Backend, str]]:
    """A backend for the independent calls: the two of the seam, and the fast tier's files without MPI."""
    with _backend(request.param, request, tmp_path) as made:
        yield made


def _opened(b: Backend, key: str) -> FileHandle:
    handle = b.open(key)
    assert isinstance(handle, FileHandle) and handle.key is not None
    assert handle.backend is b
    return handle


def test_a_handle_reads_byte_ranges_alike(seam: tuple[Backend, str]) -> None:
    b, prefix = seam
    key = f"{prefix}/data.bin"
    b.write(key, DATA)
    b.sync(key)
    handle = _opened(b, key)
    try:
        assert handle.get_size() == len(DATA)
        out = bytearray(1000)
        assert handle.read_into(4096, out) == 1000 and bytes(out) == DATA[4096:5096]
        tail = np.zeros(100, dtype=np.uint8)
        assert handle.read_into(len(DATA) - 40, tail) == 40  # short at the end
        assert tail[:40].tobytes() == DATA[-40:]
        words = np.empty(10, dtype="<u4")
        handle.read_exactly(400, words)  # any writable buffer: numpy arrays too
        assert words.tolist() == list(range(100, 110))
        with pytest.raises(StorageError, match="ends before byte"):
            handle.read_exactly(len(DATA) - 4, bytearray(8))
        assert handle.read_ranges([(0, 4), (len(DATA) - 2, 10), (7, 0)]) == [DATA[:4], DATA[-2:], b""]
        assert handle.digest == ""  # nothing written through it
        handle.expect(copy="sha256:x", size=len(DATA))  # what the catalog knows; reads are unchanged
        assert handle.read_ranges([(8, 4)]) == [DATA[8:12]]
    finally:
        b.release(key, handle)


def test_the_backends_agree_on_what_they_declare(seam: tuple[Backend, str]) -> None:
    b, prefix = seam
    handle = b.open(f"{prefix}/x.bin")
    try:
        assert isinstance(handle, CollectiveHandle) == b.collective_io
        assert b.serves(b.name) and not b.serves("elsewhere")
        assert b.multipart
    finally:
        b.release(f"{prefix}/x.bin", handle)


def _parts() -> list[bytes]:
    """Three parts as S3 takes them: every one but the last at least 5 MiB."""
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, MIN_PART_SIZE, dtype=np.uint8).tobytes(),
            rng.integers(0, 256, MIN_PART_SIZE + 3, dtype=np.uint8).tobytes(), b"the last part"]


def test_a_multipart_write_appears_whole_alike(anywhere: tuple[Backend, str]) -> None:
    b, prefix = anywhere
    key = f"{prefix}/big.bin"
    b.write(key, b"old")
    parts = _parts()
    upload = b.start_upload(key)
    tags = [b.put_part(key, upload, n, part) for n, part in reversed(list(enumerate(parts, 1)))][::-1]
    assert b.read(key, [(0, 10)]) == [b"old"]  # nothing visible before the upload is finished
    b.finish_upload(key, upload, tags)
    whole = b"".join(parts)
    assert b.size(key) == len(whole)
    got = b.read(key, [(0, 64), (MIN_PART_SIZE - 5, 10), (len(whole) - 13, 13)])
    assert got == [whole[:64], whole[MIN_PART_SIZE - 5:MIN_PART_SIZE + 5], b"the last part"]
    assert hashlib.sha256(b"".join(b.read(key, [(0, len(whole))]))).digest() == hashlib.sha256(whole).digest()
    assert [Path(k).name for k, _ in b.list(prefix)] == ["big.bin"]  # no part left behind


def test_an_aborted_multipart_write_leaves_the_key_as_it_was(anywhere: tuple[Backend, str]) -> None:
    b, prefix = anywhere
    key = f"{prefix}/kept.bin"
    b.write(key, b"as it was")
    upload = b.start_upload(key)
    b.put_part(key, upload, 1, _parts()[0])
    b.abort_upload(key, upload)
    assert b.read(key, [(0, 100)]) == [b"as it was"]
    assert [Path(k).name for k, _ in b.list(prefix)] == ["kept.bin"]


def test_space_is_given_back_where_the_backend_can(anywhere: tuple[Backend, str]) -> None:
    b, prefix = anywhere
    key = f"{prefix}/space.bin"
    block = 1 << 16
    data = np.full(4 * block, 7, dtype=np.uint8).tobytes()
    b.write(key, data)
    assert not b.reclaimed(key, block, 3 * block)  # data there
    if not b.partial_writes:  # an object is replaced whole: never cut, no holes
        for call in (lambda: b.truncate(key, block), lambda: b.reclaim(key, block, block)):
            with pytest.raises(StorageError) as err:
                call()
            assert err.value.errno == 95  # EOPNOTSUPP
        assert b.read(key, [(0, len(data))]) == [data]
        return
    try:
        b.reclaim(key, block, 2 * block)
    except StorageError as exc:  # a file system without holes says so
        assert exc.errno in (95, 38)
    else:
        assert b.size(key) == len(data) and b.reclaimed(key, block, 3 * block)
        assert b.read(key, [(block - 1, 2), (3 * block - 1, 2)]) == [b"\x07\x00", b"\x00\x07"]
    b.truncate(key, block)
    assert b.size(key) == block and b.read(key, [(0, 2 * block)]) == [data[:block]]
    assert not b.reclaimed(f"{prefix}/nothing-here", 0, 10)


def test_the_fast_tier_without_mpi_opens_no_handle(tmp_path: Path) -> None:
    files = PosixFiles()
    with pytest.raises(StorageError, match="without a communicator"):
        files.open(tmp_path / "a.bin")
    assert files.name == "mpiio" and not files.collective_io


def test_an_object_handle_puts_and_reads_each_range(s3_server) -> None:
    store = ObjectStore(f"s3://sdm-contract/{uuid.uuid4().hex[:8]}", endpoint=s3_server.endpoint)
    store.ensure_bucket()
    handle = store.open("o.bin")
    assert isinstance(handle, ObjectHandle)
    handle.put(DATA)
    assert handle.get_size() == len(DATA)
    assert handle.read_each([(0, 8), (100, 4)]) == [DATA[:8], DATA[100:104]]
    parts = _parts()[1:]
    upload = handle.start_upload()
    tags = [handle.put_part(upload, n, p) for n, p in enumerate(parts, 1)]
    handle.finish_upload(upload, tags)
    assert handle.read_ranges([(0, 16), (len(parts[0]), 13)]) == [parts[0][:16], b"the last part"]
    missing = store.open("nothing-here")
    with pytest.raises(StorageError, match="no such object"):
        missing.get_size()


def test_a_file_handle_keeps_its_view_and_moves_bytes_through_mpi_io(tmp_path: Path) -> None:
    files = MPIIOBackend(MPI.COMM_SELF, writable=True)
    key = tmp_path / "view.bin"
    try:
        handle = files.open(key)
        assert isinstance(handle, MPIFileHandle) and handle.views is files.views(key)
        ints = MPI.INT32_T
        assert handle.set_view(0, ints, ints, key="ints", extent=4, elements=1) == 0
        assert handle.set_view(40, ints, ints, key="ints", extent=4, elements=1) == 10  # the kept view reaches it
        before = dict(handle.views)
        assert handle.set_view(0, ints, ints, info=[("romio_ds_read", "disable")], key="ints", extent=4,
                               elements=1) == 0  # other hints: another view
        assert handle.views != before
        values = np.arange(16, dtype=np.int32)
        handle.write_at(0, values[:8])
        handle.write_at_all(8, values[8:])  # collective over COMM_SELF
        handle.sync_all()
        back = np.zeros(16, dtype=np.int32)
        handle.read_at(0, back[:4])
        handle.read_at_all(4, back[4:])
        assert back.tolist() == list(range(16))
        handle.forget_view()
        assert "view" not in handle.views
        assert handle.set_view(0, MPI.BYTE, MPI.BYTE, key="bytes", extent=1, elements=1) == 0
        buf = np.full(100, 255, dtype=np.uint8)
        handle.read_fully(40, buf)  # 24 bytes there, the rest past the end: zeros
        assert buf[:24].tobytes() == values.tobytes()[40:] and not buf[24:].any()
        assert handle.get_size() == values.nbytes
        assert handle.read_ranges([(4, 4)]) == [values.tobytes()[4:8]]  # absolute, whatever the view
        files.release(key, handle)
        assert files.sync_unagreed(key, handle) is None
    finally:
        files.close_all()
    assert key.read_bytes() == values.tobytes()


def test_make_transfer_wraps_a_plain_mpi_file(tmp_path: Path) -> None:
    import sdm
    from sdm.io import get_method

    path = tmp_path / "plain.bin"
    array = np.arange(24, dtype="<f8").reshape(4, 6)
    fh = MPI.File.Open(MPI.COMM_SELF, str(path), MPI.MODE_RDWR | MPI.MODE_CREATE)
    try:
        piece = sdm.Block().piece(array.shape, 1, 0)
        with make_transfer(fh, 16, piece, array, "C", MPI.COMM_SELF) as t:
            assert isinstance(t.fh, MPIFileHandle) and t.fh.file is fh and t.fh.backend is None
            get_method("collective").write(t)
            assert t.fh.read_ranges([(16, 8)]) == [array.tobytes()[:8]]  # through MPI-IO, no backend
        fh.Sync()
    finally:
        fh.Close()
    assert path.read_bytes() == bytes(16) + array.tobytes()
