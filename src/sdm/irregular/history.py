"""Index histories: partitions kept in a file and described in the catalog for reuse.

After a partition is computed, the index sets of all ranks (nodes, edges, local
edges) go into one history file, three sections of int64 one after the other, each
rank's part contiguous inside its section; the catalog's ``index_histories`` /
``index_history_parts`` record the problem, the content hash of the inputs, the rank
count and where every rank's parts are.  A later run on the same rank count with the
same inputs reads its part back with three contiguous reads and skips the exchange.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from .._collective import Failure, agree, capture, root_call
from ..catalog import irregular as records
from ..errors import StorageError
from ..storage import component, extend_file, inside
from ..storage.failures import storage_error
from .partitioning import Partition

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["save_history", "load_history", "describe_history", "sidecar", "SECTIONS"]

SECTIONS = ("nodes", "edges", "local_edges")
_ITEM = 8  # int64


def _arrays(p: Partition) -> dict[str, np.ndarray]:
    return {"nodes": p.nodes, "edges": p.edges, "local_edges": p.local_edges.ravel()}


def history_path(session: "Session", problem: str, content_hash: str, nparts: int) -> str:
    """Relative path of a history file (SDM-generated, sanitized)."""
    return str(Path(component(session.application)) / "histories" / f"{component(problem)}.{content_hash[:16]}.p{nparts}.idx")


def save_history(
    session: "Session", problem: str, content_hash: str, parts: list[Partition], nparts: int, sources: dict | None = None
) -> int:
    """Write the partitions of all (virtual) ranks to a history file and register it.

    Collective. ``sources`` identifies unchanged inputs (see ``EdgeFile.identity``).
    Returns the history id.
    """
    s = session
    mine = [(p.rank, {k: int(a.size) for k, a in _arrays(p).items()}, p.n_owned_nodes, p.n_owned_edges) for p in parts]
    every = sorted((x for lst in s.comm.allgather(mine) for x in lst), key=lambda x: x[0])
    offsets: dict[tuple[str, int], int] = {}
    pos = 0
    for section in SECTIONS:
        for v, sizes, _, _ in every:
            offsets[(section, v)] = pos
            pos += sizes[section] * _ITEM
    rel = history_path(s, problem, content_hash, nparts)
    path = inside(s.root, Path(rel))
    if s.rank == 0:
        agree(s.comm, capture(extend_file, path, 0, rank=0)[1])
    else:
        agree(s.comm, None)
    fh = MPI.File.Open(s.comm, str(path), MPI.MODE_WRONLY | MPI.MODE_CREATE)
    failure = None
    try:
        try:
            for p in parts:
                for section, arr in _arrays(p).items():
                    fh.Write_at(offsets[(section, p.rank)], np.ascontiguousarray(arr, dtype=np.int64))
        except MPI.Exception as exc:
            failure = Failure(storage_error(exc, f"cannot write index history {path}", path, needed=0), s.rank)
        agree(s.comm, failure)
        s.files.sync(path, fh)
    finally:
        fh.Close()
    parts_rows = []
    for v, sizes, n_own_nodes, n_own_edges in every:
        for section in SECTIONS:
            parts_rows.append(records.HistoryPart(section, v, offsets[(section, v)], sizes[section], "<i8"))
        parts_rows.append(records.HistoryPart("nodes.owned", v, offsets[("nodes", v)], n_own_nodes, "<i8"))
        parts_rows.append(records.HistoryPart("edges.owned", v, offsets[("edges", v)], n_own_edges, "<i8"))
    fields: dict[str, Any] = dict(application=s.application, problem=problem, content_hash=content_hash, nprocs=nparts, path=rel,
                  nbytes=pos, run_id=s.run_id if s.mode != "r" else None, parts=parts_rows, sources=sources)

    def register() -> int:
        created = datetime.now(timezone.utc)
        describe_history(path, fields, created, sync=s.sync)  # durable before the catalog knows it (sdm rebuild)
        return records.register_history(s.open_catalog(), root=str(s.root), created_at=created, **fields)

    return root_call(s.comm, register)


def describe_history(path: Path, fields: dict[str, Any], created: datetime, *, sync: bool) -> None:
    """Write a history file's description beside it (``<file>.json``), for ``sdm rebuild``.

    One line in the meta-file's format (:func:`sdm.catalog.metafile.line_of`, type
    ``history``, a CRC-32 last): the fields :func:`records.register_history` takes, the
    data root left out (the description sits in it).
    """
    from ..catalog.metafile import FORMAT, line_of

    record = {"v": FORMAT, "t": "history", **fields, "created": created.isoformat(),
              "parts": [[p.name, p.rank, p.offset, p.count, p.dtype] for p in fields["parts"]]}
    side = sidecar(path)
    tmp = side.with_name(side.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(line_of(record))
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, side)
    except OSError as exc:
        raise storage_error(exc, f"cannot write the description of index history {path}", side, needed=0) from None


def sidecar(path: Path) -> Path:
    """The description of a history file (see :func:`describe_history`)."""
    return path.with_name(path.name + ".json")


def load_history(session: "Session", record: records.HistoryRecord) -> Partition:
    """Read this rank's partition from a history (collective); records the reuse."""
    s = session
    t0 = time.perf_counter()
    path = inside(Path(record.root), Path(record.path))

    def read() -> Partition:
        got = {}
        with open(path, "rb") as f:  # three contiguous reads of this rank's parts
            for section in SECTIONS:
                part = record.part(section, s.rank)
                f.seek(part.offset)
                data = np.frombuffer(f.read(part.count * _ITEM), dtype="<i8")
                if data.size != part.count:
                    raise StorageError(f"index history {path} is shorter than the catalog says; remove it or recompute")
                got[section] = data.astype(np.int64)
        return Partition(
            nprocs=record.nprocs,
            rank=s.rank,
            nodes=got["nodes"],
            n_owned_nodes=record.part("nodes.owned", s.rank).count,
            edges=got["edges"],
            n_owned_edges=record.part("edges.owned", s.rank).count,
            local_edges=got["local_edges"].reshape(-1, 2),
            source="history",
        )

    if s.rank == 0 and not os.path.exists(path):
        failure = capture(_fail, f"index history file {path} is missing", rank=0)[1]
    else:
        failure = None
    agree(s.comm, failure)
    part, failure = capture(read, rank=s.rank)
    seconds = s.comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    agree(s.comm, failure)
    root_call(s.comm, lambda: records.record_history_use(s.open_catalog(), record.id, s.run_id, seconds))
    part.stats.update(exchanged_edges=0, seconds=seconds, history_id=record.id)  # type: ignore[union-attr]
    return part  # type: ignore[return-value]


def _fail(message: str) -> None:
    raise StorageError(message)
