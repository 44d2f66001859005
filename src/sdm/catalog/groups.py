"""Groups, their datasets, the datasets' distributions and the attributes of runs, groups and datasets.

A group is defined once per run with its datasets (:meth:`Groups.define_group`: one
transaction, every dataset in one ``executemany``); attributes set on a group propagate to
the datasets named with it (the paper's propagation).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from ..errors import CatalogError, GroupExistsError, GroupNotFoundError, RunNotFoundError
from ..suggest import closest
from . import schema as S
from .connection import CHUNK, Database, Store, checked_id, inserted_id, short_error
from .records import DatasetSpec, GroupRecord
from .runs import Runs
from .values import encode_all

__all__ = ["Groups"]


class Groups(Store):
    """The groups, datasets and attributes of a catalog's runs.

    Parameters
    ----------
    db : Database
    runs : Runs
        The runs of the same catalog (a group is read as part of its run).
    """

    def __init__(self, db: Database, runs: Runs) -> None:
        super().__init__(db)
        self.runs = runs

    @staticmethod
    def _put_attributes(con, run_id: int, group_id: int | None, dataset_ids: list[int | None], encoded) -> None:
        t = S.attributes
        for dataset_id in dataset_ids:
            for key, vtype, vnum, vstr in encoded:
                where = [t.c.run_id == run_id, t.c.key == key]
                where.append(t.c.group_id == group_id if group_id is not None else t.c.group_id.is_(None))
                where.append(t.c.dataset_id == dataset_id if dataset_id is not None else t.c.dataset_id.is_(None))
                con.execute(t.delete().where(*where))
                con.execute(
                    t.insert().values(
                        run_id=run_id,
                        group_id=group_id,
                        dataset_id=dataset_id,
                        key=key,
                        value_type=vtype,
                        value_num=vnum,
                        value_str=vstr,
                    )
                )

    def set_attributes(
        self,
        run_id: int,
        attributes: dict[str, Any],
        *,
        group_id: int | None = None,
        dataset_ids: Sequence[int] = (),
        on_group: bool = True,
    ) -> None:
        """Set typed attributes on a run, or on a group and its datasets.

        With ``group_id``, the attributes go to the group itself (unless ``on_group`` is
        false) and to each dataset in ``dataset_ids`` (the paper's propagation).

        Every key and value is checked (see :mod:`sdm.catalog.values`) before the one
        transaction that stores them all, so a refused attribute leaves nothing changed.

        Raises
        ------
        InvalidArgumentError
            A key or value is refused, or *attributes* is not a mapping.
        RunNotFoundError
            No such run.
        CatalogError
            The catalog refused the rows (e.g. a group or dataset id of another run).
        """
        encoded = encode_all(attributes)
        rid = checked_id(run_id)
        try:
            with self.db.tx() as con:
                if rid is None or con.execute(sa.select(S.runs.c.id).where(S.runs.c.id == rid)).first() is None:
                    raise RunNotFoundError(f"no run {run_id} in catalog {self.url!r}")
                if group_id is None:
                    self._put_attributes(con, rid, None, [None], encoded)
                else:
                    owners = ([None] if on_group else []) + list(dataset_ids)
                    self._put_attributes(con, rid, group_id, owners, encoded)
        except SQLAlchemyError as exc:
            raise CatalogError(
                f"catalog {self.url!r} refused the attributes of run {run_id}: {short_error(exc)}"
            ) from None

    def define_group(self, run_id: int, name: str, level: int, specs: Sequence[DatasetSpec], *,
                     kind: str = "state", steps_per_file: int | None = None, archive: str | None = None,
                     subfiles: int | None = None) -> GroupRecord:
        """Create a group with its datasets, or return it if it exists identically.

        Parameters
        ----------
        kind : {"state", "topology"}
            What the group holds (checked by the caller, :func:`sdm.segments.check_kind`).
        steps_per_file : int, optional
            Levels 2 and 3: steps per data file (None: one file).
        archive : str, optional
            ``s3://BUCKET/PREFIX``: the group writes to the archive tier there (None: the fast tier).
        subfiles : int, optional
            K subfiles per step (0: chosen per write by the planner; None: one file).

        Raises
        ------
        GroupExistsError
            A group of that name exists with other datasets, another level, kind or
            number of steps per file.
        """
        with self.db.tx() as con:
            row = con.execute(
                sa.select(S.groups).where(S.groups.c.run_id == run_id, S.groups.c.name == name)
            ).mappings().first()
            if row is None:
                pos = con.execute(
                    sa.select(sa.func.count()).select_from(S.groups).where(S.groups.c.run_id == run_id)
                ).scalar_one()
                gid = inserted_id(con.execute(
                    S.groups.insert().values(run_id=run_id, name=name, level=int(level), position=pos, kind=kind,
                                             steps_per_file=steps_per_file, archive=archive, subfiles=subfiles)
                ))
                rows = [dict(group_id=gid, name=spec.name, position=i, dtype=spec.dtype,
                             shape=json.dumps(list(spec.shape)), storage_order=spec.order,
                             dims=None if spec.dims is None else json.dumps(list(spec.dims)),
                             compression=spec.compression,
                             chunks=None if spec.chunks is None else json.dumps(list(spec.chunks)))
                        for i, spec in enumerate(specs)]
                if rows:  # every dataset in one executemany
                    con.execute(S.datasets.insert(), rows)
        group = self.group(run_id, name)
        existing = [DatasetSpec(d.name, d.dtype, d.shape, d.order, d.dims, d.compression, d.chunks)
                    for d in group.datasets]
        if row is not None and (existing != list(specs) or group.level != int(level) or group.kind != kind
                                or group.steps_per_file != steps_per_file or group.archive != archive
                                or group.subfiles != subfiles):
            sub = f", subfiles {group.subfiles}" if group.subfiles is not None or subfiles is not None else ""
            raise GroupExistsError(
                f"group {name!r} already exists in run {run_id} with level {group.level}, kind {group.kind!r}, "
                f"steps_per_file {group.steps_per_file}, archive {group.archive}{sub} and datasets {existing}; reopen it "
                "with the same definition "
                "or use another name"
            )
        return group

    def group(self, run_id: int, name: str) -> GroupRecord:
        """Return a group of a run with its datasets and steps (nothing else of the run is read).

        Raises
        ------
        RunNotFoundError, GroupNotFoundError
        """
        rid = checked_id(run_id)
        found = [] if rid is None else self.runs.load([rid], group=name, steps=True)
        if not found:
            raise RunNotFoundError(f"no run {run_id} in catalog {self.url!r}")
        if found[0].groups:
            return found[0].groups[0]
        names = [g.name for g in self.runs.run(run_id, steps=False).groups]
        raise GroupNotFoundError(f"run {run_id} has no group {name!r}; its groups are {names}{closest(name, names)}")

    def set_distribution(self, dataset_ids: Sequence[int], distribution: dict[str, Any] | None) -> None:
        """Record the writer's data view (the paper's access pattern) for datasets (None: none)."""
        text = None if distribution is None else json.dumps(distribution)
        ids = [int(i) for i in dataset_ids]
        with self.db.tx() as con:
            for start in range(0, len(ids), CHUNK):  # bounded parameters however many datasets
                con.execute(
                    S.datasets.update()
                    .where(S.datasets.c.id.in_(ids[start:start + CHUNK]))
                    .values(distribution=text)
                )
