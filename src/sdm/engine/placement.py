"""Where a dump's bytes go: fresh space for every dataset of a dump, placed alike on every rank.

A write never touches the bytes of a committed row: every version of a step goes to fresh
space reserved through the catalog (a new file at level 1, bytes past a file's high-water
mark at levels 2 and 3), so two writers never share bytes.  Rank 0 reserves ahead in chunks
(:class:`~sdm.engine.space.SpacePool`) which every rank holds alike: a dump of new steps
that the chunks hold is placed on every rank with no exchange (:meth:`Placing._preplace`);
any other is placed by rank 0 once the dump's opening exchange passed, and handed out with
one broadcast (:meth:`Placing._reserve_everywhere`).
"""

from __future__ import annotations

from typing import Any, Sequence

from . import subfiled as _subfiled
from .._collective import root_vector
from ..catalog.changes import SpaceReserved
from ..errors import InternalError, InvalidArgumentError, StepExistsError, StorageError
from ..storage import appends, copy_range, extend_file
from .checks import _has_gaps
from .state import GroupState

__all__ = ["Placing"]

_RESERVE_TRIES = 64  # level-1 versions tried when earlier ones are taken (crash leftovers)


class Placing(GroupState):
    """The placement of a group's dumps (mixed into :class:`~sdm.engine.write.Writing`)."""

    def _plan_write(self, names: Sequence[str], step: int, overwrite: bool) -> list[int | None]:
        """Rank 0: the version each dataset's write replaces (None: a new step), or why it cannot be written."""
        s = self.session
        replaced: list[int | None] = []
        cut = self.record.truncated_after
        for name in names:
            rec = self.dataset(name)
            if cut is not None and step <= cut and step not in self._steps[name]:
                raise InvalidArgumentError(
                    f"step {step} of dataset {name!r} (group {self.name!r}, run {s.run_id}) comes before the group's "
                    f"truncation after step {cut}: new steps must be > {cut}"
                )
            # steps this session has not seen need no lookup: the commit still refuses duplicates
            known = step in self._steps[name] or s.mode == "a" or overwrite
            existing = s.open_catalog().lookup_write(rec.id, step) if known else None
            if existing is not None and not overwrite:
                raise StepExistsError(
                    f"step {step} of dataset {name!r} (group {self.name!r}, run {s.run_id}) was already written; "
                    "pass overwrite=True to replace it"
                )
            if (existing is not None and self.record.archive is not None and name not in self._ranked
                    and _has_gaps(self._view(name).dist)):
                raise InvalidArgumentError(
                    f"step {step} of dataset {name!r} cannot be overwritten on the archive tier with a map that leaves "
                    "rows unwritten (they would keep their earlier values in a file, but an object is written whole); "
                    "write every row, or overwrite on the fast tier")
            replaced.append(existing.version if existing is not None else None)
        return replaced

    def _new_steps(self, names: Sequence[str], step: int, overwrite: bool) -> bool:
        """Whether a dump of *step* replaces nothing, as every rank knows alike: no step this session has
        seen, in mode ``"w"``, without *overwrite* (rank 0 then makes no lookup, see :meth:`_plan_write`)."""
        s = self.session
        return not overwrite and s.mode != "a" and not any(step in self._steps[n] for n in names)

    def _preplace(self, names: Sequence[str], step: int, overwrite: bool) -> list[tuple[str, int, int, int | None]] | None:
        """Where a dump goes when the chunks reserved ahead hold it, as every rank computes it alike (None: rank 0
        reserves once the dump's opening exchange passed, :meth:`_reserve_everywhere`); nothing is taken yet.

        Levels 2 and 3 on the fast tier, no subfiles, new steps only (:meth:`_new_steps`),
        and views that leave no element unwritten: every byte of the dump is then written
        by some rank, so the files need not be extended ahead of the write as
        :meth:`_reserve` does for a map that leaves rows unwritten (``extend_file``).
        """
        if not (appends(self.level) and self.record.archive is None and self.record.subfiles is None
                and self._new_steps(names, step, overwrite)
                and not any(self.dataset(n).compression for n in names)  # sizes known after the exchange
                and not any(_has_gaps(self._view(n).dist) for n in names)):
            return None
        wanted = [(self._relative(n, step, 1), self._nbytes[n]) for n in names]
        offsets = self._pool.peek(wanted)
        return None if offsets is None else [(rel, off, 1, None) for (rel, _), off in zip(wanted, offsets)]

    def _reserve_everywhere(self, names: Sequence[str], step: int, replaced: Any, sizes: Sequence[int],
                            layouts: Sequence[Any] | None = None,
                            placed: Sequence[tuple[str, int, int, int | None]] | None = None,
                            ) -> list[tuple[str, int, int, int | None]]:
        """Rank 0 reserves *sizes* bytes (:meth:`_reserve`); every rank gets ``(path, offset, version, replaced)``.

        A subfiled dataset's :class:`sdm.engine.subfiled.Layout` in *layouts* gets the offset of
        each of its extents (its place is then the data file's path, which names the subfiles).
        Every rank holds the chunks reserved ahead (:class:`~sdm.engine.space.SpacePool`):
        a dump *placed* from them before its opening exchange (:meth:`_preplace`) takes its
        space on every rank alike, with no broadcast; otherwise rank 0 hands out the chunks
        it holds after its reservation with the places.
        """
        s = self.session
        n = len(names)
        if placed is not None:
            taken = self._pool.take([(rel, size) for (rel, _, _, _), size in zip(placed, sizes)])
            if taken != [p[1] for p in placed]:
                raise InternalError(f"space reserved ahead moved between the placement and the take of a dump of "
                                    f"{list(names)}; this is a bug, please report it")
            return list(placed)
        layouts = list(layouts) if layouts is not None else [None] * n
        pooled = appends(self.level) and self.record.archive is None
        # the files whose chunks the dump draws on: named alike everywhere (levels 2 and 3 name no version)
        files = list(dict.fromkeys(self._relative(nm, step, 1) for nm, lay in zip(names, layouts)
                                   if lay is None)) if pooled else []
        width = 3 * n + sum(len(lay.extents) for lay in layouts if lay is not None) + 3 * len(files)

        def reserve() -> list[int]:
            places = self._reserve(names, step, replaced, sizes, layouts)
            return ([p[1] for p in places] + [p[2] for p in places] + [-1 if p[3] is None else p[3] for p in places]
                    + [o for lay in layouts if lay is not None for o in lay.offsets]
                    + [x for rel in files for x in self._pool.state(rel)])

        got = root_vector(s.comm, width, reserve)
        out = []
        at = 3 * n
        for i, name in enumerate(names):
            version = int(got[n + i])
            rel = self._relative(name, step, version)
            old = int(got[2 * n + i])
            out.append((rel, int(got[i]), version, None if old < 0 else old))
            lay = layouts[i]
            if lay is not None:
                lay.offsets = [int(x) for x in got[at:at + len(lay.extents)]]
                at += len(lay.extents)
        if s.rank != 0:  # the chunks rank 0 holds now
            for j, rel in enumerate(files):
                self._pool.adopt(rel, got[at + 3 * j:at + 3 * j + 3].tolist())
        return out

    def _reserve(self, names: Sequence[str], step: int, replaced: Sequence[int | None], sizes: Sequence[int],
                 layouts: Sequence[Any] | None = None) -> list[tuple[str, int, int, int | None]]:
        """Rank 0, once every rank agreed to the write: fresh space (*sizes* bytes) for each dataset.

        Returns ``(relative path, offset, version, version replaced)`` per dataset. Every
        version is written to fresh space reserved through the catalog (a new file at
        level 1, space past the file's high-water mark at levels 2 and 3): the bytes of
        a committed row are never modified, and two writers never share bytes.
        """
        s = self.session
        versions = [1 if old is None else old + 1 for old in replaced]
        places: list[tuple[str, int] | None] = [None] * len(names)
        for i, lay in enumerate(layouts or ()):
            if lay is not None:  # subfiled: its extents' space is reserved below, in the subfiles
                places[i] = (self._relative(names[i], step, versions[i]), 0)
        if appends(self.level) and self.record.archive is None:  # from the space reserved ahead
            todo = [i for i, p in enumerate(places) if p is None]
            rels = [self._relative(names[i], step, versions[i]) for i in todo]
            for i, rel, start in zip(todo, rels, self._pool.take([(rel, sizes[i]) for rel, i in zip(rels, todo)])):
                places[i] = (rel, start)
        for _ in range(_RESERVE_TRIES):
            todo = [i for i, p in enumerate(places) if p is None]
            if not todo:
                break
            rels = [self._relative(names[i], step, versions[i]) for i in todo]
            offsets = s.record(SpaceReserved(s.run_id, tuple(
                (rel, self.level, sizes[i], not appends(self.level)) for rel, i in zip(rels, todo)
            )))
            for i, rel, offset in zip(todo, rels, offsets):
                if offset is None:  # that version's file is taken (a crashed or concurrent write): next one
                    versions[i] += 1
                else:
                    places[i] = (rel, offset)
        if any(p is None for p in places):
            raise StorageError(f"could not reserve a new file for step {step} in {_RESERVE_TRIES} tries")
        reserved = [p for p in places if p is not None]
        subfiled = [i for i, lay in enumerate(layouts or ()) if lay is not None]
        if subfiled and layouts is not None:  # every extent's space, in one transaction
            _subfiled.reserve(self, [reserved[i][0] for i in subfiled], [layouts[i] for i in subfiled])
        out = []
        ends: dict[str, int] = {}  # each file's end after this dump: extended once
        for name, (rel, offset), version, old, nbytes, lay in zip(names, reserved, versions, replaced, sizes,
                                                                  layouts or [None] * len(names)):
            if self.record.archive is not None:  # an object, made whole by the write (unwritten bytes: zeros)
                out.append((rel, offset, version, old))
                continue
            if lay is not None:  # subfiled: a range in each extent's subfile (the data file itself is not used)
                if old is not None and _has_gaps(self._view(name).dist):
                    prev = s.open_catalog().lookup_write(self.dataset(name).id, step)
                    assert prev is not None  # the version it replaces
                    _subfiled.copy_previous(self, prev, rel, lay, self._read_bytes)
                out.append((rel, offset, version, old))
                continue
            ends[rel] = max(ends.get(rel, 0), offset + nbytes)
            if old is not None and name not in self._ranked and _has_gaps(self._view(name).dist):
                extend_file(self._absolute(rel), offset + nbytes)
                # rows the gappy map does not write keep their earlier values, as they would in place
                prev = s.open_catalog().lookup_write(self.dataset(name).id, step)
                assert prev is not None  # the version it replaces
                copy_range(self._absolute(prev.path), prev.offset, self._absolute(rel), offset, nbytes)
            out.append((rel, offset, version, old))
        for rel, end in ends.items():
            extend_file(self._absolute(rel), end)
        return out
