"""Import: read arrays from raw binary files SDM did not write (the paper's SDM_import).

An import names the external data (file, byte offset, dtype with its byte order,
element count or shape) and how to spread it over the ranks: contiguous blocks of rows
read in parallel (the default), or any data view, map arrays included.  Every rank
reads its own part with one collective MPI-IO call; the import is recorded in the
catalog's ``imports`` table (source, offset, dtype, count, checksum, seconds) so a
later run can find what was imported and from where.  The checksum is
:data:`sdm.integrity.ALGORITHM` (``mix64-v2``) of the bytes as read; the table has no
algorithm column, and imports recorded before ``mix64-v2`` hold ``sum64-v1``.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from mpi4py import MPI

from . import _validate as check
from . import integrity
from ._collective import agree, capture, root_call
from .catalog.changes import ImportRecorded
from .dtypes import check_dtype
from .errors import InvalidArgumentError, StorageError
from .io import Transfer, get_method
from .layout import Block, Distribution, MapArray
from .layout.agreement import agree_view
from .layout.datatypes import freeing
from .layout.views import ResolvedView
from .storage import check_name
from .storage.failures import storage_error
from .storage.backends.mpiio import MPIFileHandle

if TYPE_CHECKING:
    from .engine.session_state import SessionState as Session

__all__ = ["import_array", "rows_view"]


def rows_view(ndim: int, nprocs: int) -> Block:
    """Contiguous blocks of rows: the default view of an import."""
    return Block(grid=(nprocs,) + (1,) * (ndim - 1))


def _describe(dtype: Any, shape: Sequence[int] | None, count: int | None, offset: int) -> tuple[np.dtype, tuple[int, ...]]:
    dt = check_dtype(dtype, "the import")
    if shape is None and count is None:
        raise InvalidArgumentError("an import needs count= (elements) or shape= (global shape)")
    if count is not None:
        count = check.integer(count, "import count", maximum=check.MAX_BYTES)
    if shape is not None:
        shp = check.shape(shape, "import shape")
    else:
        assert count is not None  # one of them was given (checked above)
        shp = (count,)
    offset = check.integer(offset, "import offset", maximum=check.MAX_BYTES)
    if count is not None and int(np.prod(shp, dtype=np.int64)) != count:
        raise InvalidArgumentError(f"import shape {shp} holds {int(np.prod(shp))} elements, not count={count}")
    if int(np.prod(shp, dtype=np.int64)) * dt.itemsize > check.MAX_BYTES:
        raise InvalidArgumentError(f"import of shape {shp} and dtype {dt} is larger than SDM reads ({check.MAX_BYTES} bytes)")
    return dt, shp


def import_array(
    session: "Session",
    name: str,
    source: str | os.PathLike,
    *,
    dtype: Any,
    shape: Sequence[int] | None = None,
    count: int | None = None,
    offset: int = 0,
    view: Distribution | None = None,
    native: bool = True,
) -> np.ndarray:
    """Read an external raw array collectively; see :meth:`sdm.Session.import_array`."""
    s = session
    try:  # a bad source is refused by local() on every rank
        src = Path(source).expanduser().resolve()
    except (TypeError, ValueError, OSError, RuntimeError):
        src = None

    effective = view.all_rows() if isinstance(view, MapArray) else view  # an import fills ghost rows too
    agree_view(s.comm, effective, f"import_array {name!r}")  # before any collective that depends on the view

    def local() -> tuple[ResolvedView, np.ndarray]:
        check_name(name, "import")
        check.path(source, "import source")
        check.flag(native, "native")
        if view is not None and not isinstance(view, Distribution):
            raise InvalidArgumentError(f"view must be a Distribution (Block, MapArray, ...), got {type(view).__name__}")
        dt, shp = _describe(dtype, shape, count, offset)
        dist = effective if effective is not None else rows_view(len(shp), s.size)
        piece = dist.piece(shp, s.size, s.rank)
        resolved = ResolvedView(dist, piece, dt, "C")
        return resolved, np.zeros(piece.memory_shape, dtype=dt)

    def check_source() -> None:
        dt, shp = _describe(dtype, shape, count, offset)
        need = int(offset) + int(np.prod(shp, dtype=np.int64)) * dt.itemsize
        assert src is not None  # a bad source path was refused by local() on every rank
        try:
            size = os.path.getsize(src)
        except OSError as exc:
            raise StorageError(f"cannot import {name!r}: {src} cannot be read ({exc.strerror})", errno=exc.errno) from None
        if size < need:
            raise StorageError(
                f"cannot import {name!r}: {src} holds {size} bytes but offset {offset} + "
                f"{int(np.prod(shp))} x {dt.itemsize} bytes needs {need}"
            )

    prepared, failure = capture(local, rank=s.rank)
    if s.rank == 0 and failure is None:
        _, failure = capture(check_source, rank=0)
    agree(s.comm, failure)
    resolved, arr = prepared  # type: ignore[misc]
    # a user view may come from the ranks (Subarray, MapArray): check it fits together
    _, failure = capture(resolved.dist.check, resolved.piece.shape, resolved.piece, s.comm, rank=s.rank)
    agree(s.comm, failure)

    assert src is not None  # refused above otherwise, on every rank
    fh = MPIFileHandle(s.sources.get(src), None, src)
    t0 = time.perf_counter()

    def transfer() -> None:
        mem, made = resolved.memory(arr)
        with freeing(made):
            try:
                get_method("exchange" if resolved.piece.kind == "map" else "collective").read(
                    Transfer(fh, int(offset), resolved.etype, resolved.ftype, mem, resolved.piece, arr, "C", s.comm, s.hints)
                )
            except MPI.Exception as exc:
                raise storage_error(exc, f"MPI-IO read of {src} failed", src) from None

    failure = capture(transfer, rank=s.rank)[1]  # any error reaches every rank at the next agree
    seconds = time.perf_counter() - t0
    partial: int | None = 0
    if failure is None:
        partial, failure = capture(integrity.piece_share, resolved.piece, arr, "C", integrity.ALGORITHM, rank=s.rank)
    shares = agree(s.comm, failure, (seconds, partial))
    resolved.free()
    dt, shp = resolved.dtype, resolved.piece.shape
    mode = "map" if resolved.dist.kind == "map" else ("contiguous" if resolved.dist == rows_view(len(shp), s.size) else resolved.dist.kind)
    root_call(
        s.comm,
        lambda: _record_import(
            s,
            run_id=s.run_id,
            name=name,
            source=str(src),
            offset=int(offset),
            dtype=dt.str,
            count=int(np.prod(shp, dtype=np.int64)),
            shape=shp,
            mode=mode,
            nbytes=int(np.prod(shp, dtype=np.int64)) * dt.itemsize,
            checksum=integrity.to_hex(integrity.combine([p for _, p in shares])),
            checksum_algo=integrity.ALGORITHM,
            seconds=max(t for t, _ in shares),
            nprocs=s.size,
            imported_at=datetime.now(timezone.utc),
        ),
    )
    if native and not dt.isnative:
        arr = arr.astype(dt.newbyteorder("="))
    return arr


def _record_import(s: "Session", **row: Any) -> int:
    """Rank 0: the import's row in the catalog, recorded first in the run's meta-file (if the session keeps one)."""
    run_id = row.pop("run_id")
    return s.record(ImportRecorded(run_id, row))
