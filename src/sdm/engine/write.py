"""The write protocol of one dump: check, agree, place, move, sync, close, commit (every rank).

See docs/design.md, "A write": one opening exchange, one placement (from the space reserved
ahead), one combined call per file for the small datasets that share it
(:mod:`sdm.io.combined`) and one transfer per other dataset, one sync per file, one
closing exchange, one commit of every row.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .. import _validate as check
from .. import convert, integrity
from . import compressed as _compressed
from . import ranked as _ranked_io
from . import subfiled as _subfiled
from .._collective import (capture)
from ..errors import (
    InvalidArgumentError,
    InvalidNameError,
    SDMError,
)
from ..io import get_method
from ..io.combined import COMBINABLE
from ..io import remote as _remote
from ..layout.views import ResolvedView
from ..planner import Decision as _Decision
from ..storage import appends
from ..storage.durability import fsync_path

from .background import check_wait
from .checks import WRITE_CALL, _check_array, _check_step, _key
from .placement import Placing
from .state import _ARCHIVE_WRITE, _THREADED_SHARE


__all__ = ["Writing"]


class _ShareJob:
    """This rank's checksum share of one write, computed beside the I/O when the piece is large.

    The share reads the local array, as the I/O does; both only read it.  When the
    node has a core to spare for every rank (``threaded``), a large piece's share runs
    in a worker thread while MPI-IO moves the bytes and the file is synced (numpy and
    MPI-IO both release the GIL); otherwise, and for a small piece, it runs in
    :meth:`result`, after the I/O: with every core taken, a second thread per rank
    only competes with the MPI library's own polling.
    """

    _pool: Any = None

    def __init__(self, view: ResolvedView, arr: np.ndarray, order: str, threaded: bool) -> None:
        self.args = (view.piece, arr, order, integrity.ALGORITHM)
        self.future = None
        if threaded and view.nbytes >= _THREADED_SHARE:
            if _ShareJob._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                _ShareJob._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sdm-checksum")
            self.future = _ShareJob._pool.submit(integrity.piece_share, *self.args)

    def result(self) -> int:
        """The share (waits for the worker)."""
        if self.future is not None:
            return int(self.future.result())
        return integrity.piece_share(*self.args)


class Writing(Placing):
    """The write protocol of a group (mixed into :class:`~sdm.engine.group_engine.GroupEngine`)."""

    def _write_dump(
        self, step: int, arrays: Mapping[str, Any], *, overwrite: bool = False, method: str | None = None,
        casting: str | None = None, wait: Any = True,
    ) -> None:
        s = self.session
        s._check_writable("write")
        names = list(arrays) if isinstance(arrays, Mapping) else []
        if any(self._is_ranked(n) for n in names):  # the same on every rank that passes the same names
            s._ops.enter("write")
            return _ranked_io.write(self, step, arrays, overwrite=overwrite, method=method, casting=casting,
                                    wait=wait)

        def local() -> list[tuple[ResolvedView, np.ndarray]]:
            check_wait(wait)  # a bad wait= (or wait=False without MPI.THREAD_MULTIPLE): refused on every rank
            _check_step(step)
            if not isinstance(arrays, Mapping):
                raise InvalidArgumentError(
                    f"write_step needs a dict of dataset name to local array, got {type(arrays).__name__}"
                )
            if not names or len(set(names)) != len(names):
                raise InvalidNameError(f"write_step needs distinct dataset names, got {names}")
            check.flag(overwrite, "overwrite")
            check.text(method, "method", optional=True)
            self._check_write_method(method)
            convert.check_casting(casting)
            return [(self._view(n), _check_array(arrays[n], self._view(n), n, s.rank, for_read=False, casting=casting)[0])
                    for n in names]

        prepared, failure = capture(local, rank=s.rank)
        codecs = [self.dataset(n).compression if n in self._datasets else None for n in names]
        chunks: list[Any] = [None] * len(names)
        if prepared and any(codecs):  # compressed datasets: encoded before any collective call (no bytes wait on it)
            encoded, f = capture(self._encode_chunks, names, prepared, codecs, rank=s.rank)
            chunks, failure = encoded or chunks, failure or f
        plan = None
        if s.rank == 0:
            failure = s._settle() or failure  # an earlier dump's commit failure surfaces first
            if failure is None:
                plan, failure = capture(self._plan_write, names, int(step), overwrite, rank=0)
        sizes = [self._nbytes[n] for n in names] if prepared else []
        placed = self._preplace(names, int(step), bool(overwrite)) if prepared else None
        stats = [v.stats(a) for v, a in prepared] if prepared else None
        # the chunks reserved ahead are part of the call: ranks place the dump alike from them (_reserve_everywhere)
        call = (tuple(_key(n) for n in names), _key(step), _key(overwrite), _key(method), self._pool.signature())
        # exchange 1: every rank's call, failure and layout in one fixed-size allgather
        _, statsets = self._agree_call("write", call, failure, plan, stats, names=WRITE_CALL)
        # compressed datasets: every rank's chunks (boxes, stored bytes, checksums, errors) in one allgather, so that
        # every rank knows each step's stored size and where its own chunks go (alike everywhere: names agreed)
        metas = s.comm.allgather([c.meta() if c is not None else None for c in chunks]) if any(codecs) else None
        starts: list[list[int]] = []
        if metas is not None:
            totals, starts = _compressed.stored_sizes(metas, len(names))
            sizes = [t if c else size for t, c, size in zip(totals, codecs, sizes)]
        # exchange 2: rank 0 reserves fresh space, which it may only do once every rank
        # has accepted the call (exchange 1), and every rank needs the offsets before it
        # writes: one small Bcast of (offset, version, replaced version) per dataset; none
        # when the space reserved ahead holds the dump (placed above, alike on every rank)
        layouts, notes = (_subfiled.layouts(self, names) if self.record.subfiles is not None
                          else ([None] * len(names), [""] * len(names)))
        places = self._reserve_everywhere(names, int(step), plan, sizes, layouts, placed)
        archived = self.record.archive is not None
        shared = self._shared_files(names, places, layouts, method, codecs) if not archived else {}
        # the planner's view of each access (not needed for a dataset written in a combined call, nor a compressed one)
        accesses = [None if i in shared or codecs[i] else self._access(n, True, statsets, i)
                    for i, n in enumerate(names)]
        chosen = s.planner.choose_many(method or s.method, [None if archived or lay is not None else a
                                                            for a, lay in zip(accesses, layouts)])
        decisions = [_ARCHIVE_WRITE if archived else _Decision(get_method("servers"), lay.reason) if lay is not None
                     else _compressed_decision(str(codecs[i]), method) if codecs[i]
                     else _combined_decision(len(shared[i]), method or s.method) if i in shared
                     else _noted(d, note)  # type: ignore[arg-type]  # planned: not None
                     for i, (d, lay, note) in enumerate(zip(chosen.decisions, layouts, notes))]
        combined = {id(members): members for members in shared.values()}  # one call per file, alike everywhere
        n = len(names)
        extent_digests: list[list[int]] = [[0] * len(lay.extents) if lay is not None else [] for lay in layouts]
        threads = s.checksum and self._spare_cores()
        seconds = [0.0] * n
        partials = [0] * n
        failure = None
        deferred: dict[Path, None] = {}  # open files synced once, after every transfer
        subfiles: dict[Path, None] = {}  # the subfiles this rank wrote (each its own: synced here alone)
        digests: list[str] = [""] * n  # archive-tier objects: their digests (rank 0)
        for members in combined.values():  # every rank holds the same groups, in the same order
            both, f = capture(self._write_combined, members, prepared, places, [self._nbytes[x] for x in names],
                               decisions[members[0]].method.name, threads, rank=s.rank)
            if both is not None:
                for i, took, mine in zip(members, both[0], both[1]):
                    seconds[i], partials[i] = took, mine
            deferred[self._absolute(places[members[0]][0])] = None
            failure = failure or f
        done = {i for members in combined.values() for i in members}
        for i, ((view, arr), decision, (rel, offset, _, _), name) in enumerate(zip(prepared, decisions, places, names)):  # type: ignore[arg-type]
            if i in done:
                continue
            if codecs[i]:  # compressed: this rank's chunks, at its place in the step's span, with independent I/O
                spent, f = capture(_compressed.write, s.files, self._absolute(rel), offset + starts[i][s.rank],
                                   chunks[i], subfiles, rank=s.rank)
                seconds[i] = float(spent or 0.0)
                failure = failure or f
                continue
            if chosen.settles(i):  # a trial ended earlier in this dump (agreed here): its winner writes the rest
                decision = decisions[i] = _noted(chosen.settle(i, seconds, s.comm), notes[i])
            backend: Any = self._store() if archived else s.files
            path: Any = rel if archived else self._absolute(rel)
            sync_now = s.sync and not appends(self.level)
            lay = layouts[i]
            if lay is not None:  # subfiled: each extent in its own subfile, checksummed by its owner (xxh3-64)
                moved, f = capture(_subfiled.write, self, view, arr, rel, lay, subfiles, [p[i] for p in statsets],
                                   rank=s.rank)
                if moved is not None:
                    seconds[i], extent_digests[i] = moved
                failure = failure or f
                continue
            share = _ShareJob(view, arr, self.dataset(name).order, threads) if s.checksum and failure is None else None
            if archived and method is not None and _remote.is_method(method):
                decision = decisions[i] = _Decision(get_method(method), f"method {method!r} asked for")
            out, f = capture(self._transfer, backend, path, offset, view, arr, decision.method, True, sync_now,
                             rank=s.rank, stats=[p[i] for p in statsets], size=offset + self._nbytes[name],
                             digests=(digests, i))
            if out is not None:
                seconds[i], sync_failure = out
                f = f or sync_failure
            if appends(self.level):
                deferred[path] = None
            if share is not None:
                value, f2 = capture(share.result, rank=s.rank)
                partials[i] = value or 0
                f = f or f2
            failure = failure or f
        if s.sync and (deferred or subfiles):
            t0 = time.perf_counter()
            for path in deferred:  # every rank holds the same files, in the same order
                f = s.files.sync_unagreed(path)
                failure = failure or f
            for path in subfiles:  # this rank's own subfiles: no collective
                failure = failure or capture(fsync_path, path, rank=s.rank)[1]
            per = (time.perf_counter() - t0) / n
            seconds = [t + per for t in seconds]
        # exchange 3: errors (I/O, sync, checksum), the slowest rank's seconds and the sum of
        # the checksum shares, in one reduction; a rank is past it only when every node's sync
        # is done, so the commit below follows the sync
        try:
            slowest, sums = self._closing(failure, seconds, partials + [d for ds in extent_digests for d in ds])
        except SDMError:
            s.files.reset_views()  # a view may have been set on some ranks only
            raise
        checksums = [integrity.to_hex(int(x)) if s.checksum else "" for x in sums[:n]]
        at = n
        for i, lay in enumerate(layouts):  # every extent's digest: the sum of its owner's and zeros
            if lay is not None:
                extent_digests[i] = [int(x) for x in sums[at:at + len(lay.extents)]]
                at += len(lay.extents)
                checksums[i] = integrity.extents_checksum(extent_digests[i]) if s.checksum else ""
        if not archived:
            for i, (a, decision, secs, lay) in enumerate(zip(accesses, decisions, slowest, layouts)):  # alike everywhere
                if lay is None and a is not None:
                    s.planner.observe(a, decision.method.name, float(secs))
        self._commit_dump(names, int(step), places, checksums, decisions, [float(x) for x in slowest], overwrite,
                          [self._nbytes[n] for n in names], digests if archived else None,
                          subfiled=(layouts, extent_digests),
                          compressed=(codecs, metas) if metas is not None else None)

    def _shared_files(self, names: Sequence[str], places: Sequence[tuple[str, int, int, int | None]],
                      layouts: Sequence[Any], method: str | None,
                      codecs: Sequence[str | None]) -> dict[int, list[int]]:
        """The datasets of a dump written by one combined call per file (:meth:`_combined`; not subfiled or
        compressed ones): ``{index: members of its file}``."""
        groups = self._combined(names, [p[0] if lay is None and not codec else None
                                        for p, lay, codec in zip(places, layouts, codecs)], method)
        return {i: members for members in groups for i in members}

    def _encode_chunks(self, names: Sequence[str], prepared: Sequence[tuple[ResolvedView, np.ndarray]],
                       codecs: Sequence[str | None]) -> list[Any]:
        """This rank's chunks of each compressed dataset of a dump (None for the others), encoded and checked."""
        checksum = self.session.checksum
        return [None if not codec else _compressed.encode_piece(_compressed.spec_of(codec), view, arr, name, checksum,
                                                                self.dataset(name).chunks)
                for name, (view, arr), codec in zip(names, prepared, codecs)]

    def _write_combined(self, members: Sequence[int], prepared: Sequence[tuple[ResolvedView, np.ndarray]],
                        places: Sequence[tuple[str, int, int, int | None]], sizes: Sequence[int], method: str,
                        threads: bool) -> tuple[list[float], list[int]]:
        """This rank's part of one combined write: the datasets *members* of one file in one view and one call.

        Returns each dataset's seconds (the call's, shared out by size) and checksum share.
        An I/O error is raised after the collective calls, for the closing exchange; a
        failure to build the MPI types (which only an exhausted MPI library gives) would
        leave this rank out of them.
        """
        s = self.session
        path = self._absolute(places[members[0]][0])
        one_pass = s.checksum and integrity.canonical(integrity.ALGORITHM) == integrity.MIX64
        batched = _batches(prepared, members) if one_pass else []  # small pieces: shares in one pass per batch
        alone = {j for batch in batched for j in batch}
        jobs = [_ShareJob(prepared[i][0], prepared[i][1], prepared[i][0].order, threads)
                if s.checksum and j not in alone else None for j, i in enumerate(members)]
        secs = self._move_combined(path, [(places[i][1], sizes[i], *prepared[i]) for i in members], method, True)
        total = sum(sizes[i] for i in members) or 1
        shares = [job.result() if job is not None else 0 for job in jobs]
        for batch in batched:
            view = prepared[members[batch[0]]][0]
            found = integrity.piece_shares(view.piece, [prepared[members[j]][1] for j in batch], view.order)
            for j, share in zip(batch, found):
                shares[j] = share
        return [secs * sizes[i] / total for i in members], shares


def _batches(prepared: Sequence[tuple[ResolvedView, np.ndarray]], members: Sequence[int]) -> list[list[int]]:
    """Positions in *members* of the small datasets whose checksum shares one pass computes together
    (:func:`sdm.integrity.piece_shares`): pieces of at most :data:`sdm.integrity.BATCHED_BYTES` with the same
    owned indices, dtype, storage order and local array layout; batches of two or more."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for j, i in enumerate(members):
        view, arr = prepared[i]
        piece = view.piece
        if not piece.shape or view.nbytes > integrity.BATCHED_BYTES:
            continue
        key = (view.dtype.str, view.order, piece.kind, tuple(piece.shape), arr.shape, arr.strides)
        groups.setdefault(key, []).append(j)
    out = []
    for batch in groups.values():
        first = prepared[members[batch[0]]][0].piece
        same = [j for j in batch if prepared[members[j]][0].piece is first  # a shared view: the same piece
                or all(np.array_equal(a, b) for a, b in zip(prepared[members[j]][0].piece.indices, first.indices))]
        if len(same) > 1:
            out.append(same)
    return out


def _combined_decision(count: int, method: str) -> _Decision:
    """The decision for a dataset written with *count* - 1 others of its file in one call (*method*:
    the one asked for, or ``auto``: ``collective``)."""
    if method in COMBINABLE:
        return _Decision(get_method(method), f"method {method!r} asked for; {count} datasets of the dump in one file: "
                         "one file view and one call for all of them (sdm.io.combined)")
    return _Decision(get_method("collective"), f"{count} datasets of the dump in one file: one file view and one "
                     "collective call for all of them (sdm.io.combined)")


def _compressed_decision(codec: str, method: str | None) -> _Decision:
    """The decision for a compressed dataset: each rank writes its own chunks (*method*: the one asked for,
    which moves no compressed bytes)."""
    asked = f"; method {method!r} asked for applies to uncompressed datasets" if method and method != "auto" else ""
    return _Decision(get_method(_compressed.METHOD), f"compressed ({codec}): each rank encoded the box it owns and "
                     f"wrote it with independent I/O at its place in the step's span{asked}")


def _noted(decision: _Decision, note: str) -> _Decision:
    """*decision* with *note* (why a subfiled group's write kept one file) before its reason."""
    return replace(decision, reason=f"subfiles: {note}; {decision.reason}") if note else decision
