"""The read protocol of one dataset step: check, agree on rank 0's plan, move, verify (every rank)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .. import _validate as check
from .. import convert, integrity
from . import ranked as _ranked_io
from . import compressed as _compressed
from . import subfiled as _subfiled
from .._collective import (Failure, capture, exchange)
from ..dtypes import check_dtype, dtype_text, from_text
from ..errors import (
    IntegrityError,
    InvalidArgumentError,
    InvalidNameError,
    LocalArrayError,
    SDMError,
)
from ..io import get_method
from ..io import remote as _remote
from ..io.combined import COMBINABLE
from ..layout.views import ResolvedView
from ..planner import choose_method
from ..planner.remote import read_method
from ..storage.backends import is_object

from .checks import _check_array, _check_step, _key
from .state import _MASK, _PLAN_WIDTH, GroupState


__all__ = ["Reading"]


class Reading(GroupState):
    """The read protocol of a group (mixed into :class:`~sdm.engine.group_engine.GroupEngine`)."""

    def _read_step(self, name: str, step: int, out: np.ndarray | None = None, *, method: str | None = None,
             verify: bool | None = None, dtype: Any = None, casting: str | None = None,
             ranks: tuple[int, int] | None = None, box: Any = None) -> np.ndarray:
        if self._is_ranked(name):
            refused = None if box is None else Failure(InvalidArgumentError(
                f"box= does not apply to ranked dataset {name!r}; select rows with ranks="), self.session.rank)
            self.session._ops.enter("read", refused)
            return _ranked_io.read(self, name, step, out=out, method=method, verify=verify, dtype=dtype,
                                   casting=casting, ranks=ranks)
        s = self.session
        boxed = box is not None
        verify_now = (s.verify if not isinstance(verify, (bool, np.bool_)) else bool(verify)) and not boxed
        made: list[ResolvedView] = []  # a box's view, freed after the read

        def local() -> tuple[ResolvedView, np.ndarray, convert.Conversion | None]:
            _check_step(step)
            if ranks is not None:
                raise InvalidArgumentError(f"ranks= applies to ranked datasets only; dataset {name!r} is not ranked")
            check.optional_flag(verify, "verify")
            check.text(method, "method", optional=True)
            if not _remote.is_method(method):
                choose_method(method or s.method)  # validates the name
            convert.check_casting(casting)
            if boxed and verify is True:
                raise InvalidArgumentError(
                    f"a box of dataset {name!r} cannot be checked against the step's checksum, which covers the "
                    "whole step; read it with verify=False (or read the whole step with verify=True)")
            view = self._box_view(name, box, made) if boxed else self._view(name)
            wanted = None if dtype is None else check_dtype(dtype, f"the dtype read of dataset {name!r}")
            conv = None
            if out is None:
                if wanted is not None:
                    conv = convert.conversion(view.dtype, wanted, casting, f"dataset {name!r} stores "
                                              f"{convert.describe(view.dtype)}, read as {convert.describe(wanted)}")
                fortran = view.order == "F"
            else:
                if wanted is not None and isinstance(out, np.ndarray) and wanted != out.dtype:
                    raise InvalidArgumentError(f"read of dataset {name!r}: dtype {convert.describe(wanted)} differs "
                                               f"from out's {convert.describe(out.dtype)}; give one of them")
                checked, conv = _check_array(out, view, name, s.rank, for_read=True, casting=casting)
                if conv is None:
                    return view, checked, None
                fortran = not checked.flags.c_contiguous
            return view, np.zeros(view.piece.memory_shape, dtype=view.dtype, order="F" if fortran else "C"), conv

        try:
            prepared, failure = capture(local, rank=s.rank)
            plan = None
            if s.rank == 0:
                failure = s._settle() or failure  # an earlier dump's commit failure surfaces first
                if failure is None:
                    plan, failure = capture(self._plan_read, name, int(step), rank=0)
            stats = [prepared[0].stats(prepared[1])] if prepared else None
            target = prepared[2].dst if prepared and prepared[2] else None  # converting reads agree on one more exchange
            call = (_key(name), _key(step), _key(method), _key(verify), None if target is None else dtype_text(target),
                    boxed)
            got, statsets = self._agree_call("read", call, failure, plan, stats, _pack_read_plan(plan),
                                             names=("dataset", "step", "method", "verify", "dtype read as",
                                                    "box given"))
            got = got if isinstance(got, tuple) else _unpack_read_plan(got)
            rel, offset, expected, algorithm = got[:4]
            view, arr, conv = prepared  # type: ignore[misc]
            if len(got) > 4 and isinstance(got[4], _compressed.ChunkPlan):  # compressed: the chunks that meet the piece
                self._read_chunks(name, step, view, arr, got[4], verify_now and bool(expected))
            elif len(got) > 4:  # subfiled: every extent through its owner (sdm.engine.subfiled)
                self._read_subfiled(name, step, view, arr, got[4], verify_now and bool(expected), statsets)
            else:
                self._read_file(name, step, view, arr, rel, offset, expected, algorithm, method, statsets, boxed,
                                verify_now)
            if conv is not None:  # after the bytes are verified: a damaged file is an IntegrityError first
                converted, failure = capture(convert.unpack, conv, arr, view.piece, out is not None, rank=s.rank)
                exchange(s.comm, failure, [])  # out is set only once every rank converted
                assert converted is not None  # the exchange raised every rank's failure
                return converted if out is None else convert.place(converted, view.piece, out)
            return arr
        finally:
            for v in made:
                v.free()

    def _read_dump(self, step: int, names: Sequence[str] | None = None, out: Mapping[str, np.ndarray] | None = None,
                   *, method: str | None = None, verify: bool | None = None) -> dict[str, np.ndarray]:
        """Read several datasets of one step as one access (every rank): see :meth:`sdm.Group.read_step`.

        One opening exchange for all of them, one broadcast of rank 0's plan (each row's
        file, offset and checksum, looked up together), one file view and one call per file
        for the datasets that share it (:mod:`sdm.io.combined`), one closing exchange of
        errors and checksums; datasets whose bytes are elsewhere (subfiles, the archive
        tier) or too large for a combined call are read one by one inside the same access.
        """
        s = self.session
        listed = list(self._datasets) if names is None else names
        verify_now = s.verify if not isinstance(verify, (bool, np.bool_)) else bool(verify)

        def local() -> tuple[list[str], list[tuple[ResolvedView, np.ndarray]]]:
            _check_step(step)
            wanted = check.names(listed, "datasets")
            if not wanted or len(set(wanted)) != len(wanted):
                raise InvalidNameError(f"read_step needs distinct dataset names, got {wanted}")
            check.optional_flag(verify, "verify")
            check.text(method, "method", optional=True)
            if not _remote.is_method(method):
                choose_method(method or s.method)  # validates the name
            if out is not None and not isinstance(out, Mapping):
                raise InvalidArgumentError(f"read_step's out must be a dict of dataset name to local array, got "
                                           f"{type(out).__name__}")
            extra = sorted(set(out or {}) - set(wanted))
            if extra:
                raise InvalidArgumentError(f"read_step's out names datasets that are not read: {extra}")
            prepared = []
            for n in wanted:
                if self._is_ranked(n):
                    raise InvalidArgumentError(f"read_step reads global arrays; read ranked dataset {n!r} with read()")
                view = self._view(n)
                if out is not None and n in out:
                    arr, conv = _check_array(out[n], view, n, s.rank, for_read=True)
                    if conv is not None:
                        raise LocalArrayError(f"read_step reads into arrays of the stored dtype: out for dataset {n!r} "
                                              f"is {convert.describe(out[n].dtype)}, the dataset stores "
                                              f"{convert.describe(view.dtype)}; read it with read(..., dtype=)")
                else:
                    arr = np.zeros(view.piece.memory_shape, dtype=view.dtype, order="F" if view.order == "F" else "C")
                prepared.append((view, arr))
            return wanted, prepared

        got, failure = capture(local, rank=s.rank)
        plans = None
        if s.rank == 0:
            failure = s._settle() or failure  # an earlier dump's commit failure surfaces first
        wanted, prepared = got if got is not None else ([], [])
        if s.rank == 0 and failure is None:
            plans, failure = capture(self._plan_reads, wanted, int(step), rank=0)
        stats = [view.stats(arr) for view, arr in prepared] if got is not None else None
        call = (tuple(_key(n) for n in wanted) if got is not None else None, _key(step), _key(method), _key(verify))
        _, statsets = self._agree_call("read_step", call, failure, plans, stats,
                                       names=("datasets", "step", "method", "verify"))
        plans = s.comm.bcast(plans, root=0)  # every rank needs every row's place (one broadcast)
        # rows in one fast-tier file (not subfiled, not purged to the archive tier) are read together
        combined = self._combined(wanted, [p[0] if len(p) == 4 and not is_object(p[0]) else None for p in plans],
                                  method)
        done = {i for members in combined for i in members}
        seconds = [0.0] * len(wanted)
        shares = [0] * len(wanted)
        failure = None
        for members in combined:  # the same groups, in the same order, on every rank
            moved, f = capture(self._read_combined, members, prepared, plans, wanted, method, rank=s.rank)
            if moved is not None:
                for i, took in zip(members, moved):
                    seconds[i] = took
            failure = failure or f
        checked = [bool(verify_now and plans[i][2]) if i in done else False for i in range(len(wanted))]
        if failure is None:
            for i in sorted(done):
                if checked[i]:
                    view, arr = prepared[i]
                    share, failure = capture(self._verify_share, wanted[i], step, view, arr, plans[i][3], rank=s.rank)
                    shares[i] = share or 0
                    if failure is not None:
                        break
        if done:
            try:
                _, sums = self._closing(failure, [seconds[i] for i in sorted(done)], [shares[i] for i in sorted(done)])
            except SDMError:
                s.files.reset_views()  # a view may have been set on some ranks only
                raise
            for i, total in zip(sorted(done), sums):
                if checked[i] and integrity.to_hex(int(total)) != plans[i][2]:
                    raise IntegrityError(
                        f"dataset {wanted[i]!r} step {step} read from {plans[i][0]} does not match its write-time "
                        f"checksum {plans[i][3]}:{plans[i][2]}; the file was changed or damaged after the write")
        for i, (name, (view, arr), plan) in enumerate(zip(wanted, prepared, plans)):
            if i in done:
                continue
            own = [[p[i]] for p in statsets]  # this dataset's layout statistics on every rank
            if len(plan) > 4 and isinstance(plan[4], _compressed.ChunkPlan):  # compressed: the chunks that meet the piece
                self._read_chunks(name, step, view, arr, plan[4], verify_now and bool(plan[2]))
            elif len(plan) > 4:  # subfiled: every extent through its owner
                self._read_subfiled(name, step, view, arr, plan[4], verify_now and bool(plan[2]), own)
            else:
                self._read_file(name, step, view, arr, plan[0], plan[1], plan[2], plan[3], method, own, False,
                                verify_now)
        return {name: arr for name, (_, arr) in zip(wanted, prepared)}

    def _read_combined(self, members: Sequence[int], prepared: Sequence[tuple[ResolvedView, np.ndarray]],
                       plans: Sequence[tuple[Any, ...]], names: Sequence[str], method: str | None) -> list[float]:
        """This rank's part of one combined read: the rows *members* of one file in one view and one call;
        each one's seconds (the call's, shared out by size)."""
        chosen = method if method in COMBINABLE else "collective"
        path = self._absolute(plans[members[0]][0])
        secs = self._move_combined(path, [(int(plans[i][1]), self._nbytes[names[i]], *prepared[i]) for i in members],
                                   chosen, False)
        total = sum(self._nbytes[names[i]] for i in members) or 1
        return [secs * self._nbytes[names[i]] / total for i in members]

    def _read_chunks(self, name: str, step: int, view: ResolvedView, arr: np.ndarray, plan: Any, verify: bool) -> None:
        """The I/O of a read of a compressed step (independent reads) and its exchange of errors (collective)."""
        _, failure = capture(_compressed.read, self, name, step, view, arr, plan, verify, rank=self.session.rank)
        exchange(self.session.comm, failure, [])

    def _read_subfiled(self, name: str, step: int, view: ResolvedView, arr: np.ndarray, plan: Any,
                       verify: bool, statsets: list[Any]) -> None:
        """The I/O of a read of a subfiled step, its exchange of errors and its extents' checksums (collective)."""
        s = self.session
        moved, failure = capture(_subfiled.read, self, name, view, arr, plan, verify, [p[0] for p in statsets],
                                 rank=s.rank)
        digests = moved[1] if moved is not None else [0] * len(plan)
        _, sums = self._closing(failure, [moved[0] if moved else 0.0], digests)
        if verify:
            _subfiled.check_read(name, step, plan, [int(x) for x in sums])

    def _read_file(self, name: str, step: int, view: ResolvedView, arr: np.ndarray, rel: str, offset: int,
                   expected: str, algorithm: str, method: str | None, statsets: list[Any], boxed: bool,
                   verify_now: bool) -> None:
        """The I/O of a read of one run of bytes, its exchange of errors and its checksum (collective)."""
        s = self.session
        access = self._access(name, False, statsets, kind="box" if boxed else None)
        archived = is_object(rel)  # the bytes are on the archive tier only (sdm.io.remote)
        backend, key, copy = self._backend_of(rel)
        if archived:
            chosen = get_method(read_method(s, method, rel, statsets, view.piece.shape, view.dtype, view.order))
        else:
            decision = s.planner.choose(s.method if _remote.is_method(method) else method or s.method, access)
            chosen = decision.method
        moved, failure = capture(self._transfer, backend, key, offset, view, arr, chosen, False, rank=s.rank,
                                 stats=[p[0] for p in statsets], copy=copy)
        verify_now = verify_now and bool(expected)  # nothing to compare with when written without checksum
        partial: int | None = 0
        if failure is None and verify_now:
            partial, failure = capture(self._verify_share, name, step, view, arr, algorithm, rank=s.rank)
        try:
            slowest, sums = self._closing(failure, [moved[0] if moved else 0.0], [partial or 0])
        except SDMError:
            s.files.reset_views()  # a view may have been set on some ranks only
            raise
        if not archived:
            s.planner.observe(access, decision.method.name, float(slowest[0]))  # the same everywhere
        if verify_now and integrity.to_hex(int(sums[0])) != expected:
            raise IntegrityError(
                f"dataset {name!r} step {step} read from {rel} does not match its write-time checksum "
                f"{algorithm}:{expected}; the file was changed or damaged after the write"
            )

    def _box_view(self, name: str, box: Any, made: list[ResolvedView]) -> ResolvedView:
        """The view of this rank's *box* of dataset *name* (appended to *made*, to be freed after the read)."""
        from ..layout.boxes import Hyperslab, parse_box

        rec = self.dataset(name)
        dist = Hyperslab(parse_box(box, rec.shape, f"box of dataset {name!r}"))
        s = self.session
        view = ResolvedView(dist, dist.piece(rec.shape, s.size, s.rank), from_text(rec.dtype), rec.order)
        made.append(view)
        return view

    def _verify_share(self, name: str, step: int, view: ResolvedView, arr: np.ndarray, algorithm: str) -> int:
        """This rank's share of a read's checksum, with the algorithm the row was written with."""
        try:
            algorithm = integrity.canonical(algorithm)
        except InvalidArgumentError:
            raise IntegrityError(
                f"dataset {name!r} step {step} cannot be verified: its checksum algorithm {algorithm!r} is not "
                f"known to this SDM (known: {', '.join(integrity.ALGORITHMS)}); read it with verify=False"
            ) from None
        return self._partial_checksum(name, view, arr, algorithm)


def _signed(value: int) -> int:
    """A 64-bit unsigned share as the int64 with the same bits."""
    value &= _MASK
    return value - (1 << 64) if value >= 1 << 63 else value


def _pack_read_plan(plan: tuple[str, int, str, str] | None) -> list[int] | None:
    """Rank 0's read plan ``(path, offset, checksum, algorithm)`` as int64 words, or None if it does not fit.

    Words: offset, checksum (0 when none, else its 64 bits, with a flag word), the
    algorithm's index in :data:`sdm.integrity.ALGORITHMS` and the path's length, then
    the path's UTF-8 bytes.
    """
    if plan is None or len(plan) != 4:  # a subfiled step's extents travel pickled
        return None
    path, offset, checksum, algorithm = plan
    if algorithm not in integrity.ALGORITHMS and checksum:
        return None  # an unknown algorithm travels by name (the pickled exchange)
    raw = path.encode("utf-8")
    words = -(-len(raw) // 8)
    if 5 + words > _PLAN_WIDTH:
        return None
    try:
        value = int(checksum, 16) if checksum else 0
    except ValueError:
        return None
    head = [int(offset), _signed(value), 1 if checksum else 0,
            integrity.ALGORITHMS.index(algorithm) if algorithm in integrity.ALGORITHMS else -1, len(raw)]
    body: list[int] = np.frombuffer(raw.ljust(words * 8, b"\0"), dtype="<i8").tolist()
    return head + body


def _unpack_read_plan(words: np.ndarray) -> tuple[str, int, str, str]:
    """The inverse of :func:`_pack_read_plan`."""
    offset, value, has, algo, length = (int(x) for x in words[:5])
    raw = np.asarray(words[5:], dtype="<i8").tobytes()[:length]
    checksum = integrity.to_hex(value) if has else ""
    algorithm = integrity.ALGORITHMS[algo] if algo >= 0 else "none"
    return raw.decode("utf-8"), offset, checksum, algorithm
