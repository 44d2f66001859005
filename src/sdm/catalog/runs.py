"""Runs and applications in the catalog, and the search for runs by their attributes.

Registering a run (:meth:`Runs.new_run`, :meth:`Runs.restore_run` for ``sdm rebuild``),
its state as sessions open and close it, reading a run back, and the searches
(:meth:`Runs.find`, :meth:`Runs.latest_run`, :meth:`Runs.select_run`,
:meth:`Runs.list_runs`), whose conditions the database evaluates over its attribute
indexes (:mod:`sdm.catalog.queries`).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError as SAIntegrityError

from ..errors import ApplicationNotFoundError, InvalidArgumentError, RunNotFoundError
from ..suggest import closest
from . import listing as LS
from . import loading as L
from . import queries as Q
from . import reader as RD
from . import schema as S
from . import selection as SEL
from .connection import Store, checked_id, inserted_id, jsonable, utcnow
from .loading import utc as _utc
from .records import RunRecord
from .values import Condition, conditions_from, decode, encode_all

__all__ = ["Runs"]

_APPLICATION = "SELECT applications.id FROM applications WHERE applications.name = :name"


class Runs(Store):
    """The runs and applications of a catalog, and the searches for runs."""

    def app_id(self, con: Connection, name: str, *, create: bool) -> int:
        """The id of application *name* in the transaction *con*, made when missing if *create*.

        Raises
        ------
        ApplicationNotFoundError
            No such application and not *create* (the message names the closest ones).
        """
        row = con.execute(sa.select(S.applications.c.id).where(S.applications.c.name == name)).first()
        if row is not None:
            return row[0]
        if not create:
            known = con.execute(sa.select(S.applications.c.name)).scalars()
            raise ApplicationNotFoundError(f"no application {name!r} in catalog {self.url!r}{closest(name, known)}")
        try:
            with con.begin_nested():
                return inserted_id(con.execute(S.applications.insert().values(name=name, created_at=utcnow())))
        except SAIntegrityError:  # created concurrently by another job
            return con.execute(sa.select(S.applications.c.id).where(S.applications.c.name == name)).scalar_one()

    def applications(self) -> list[dict[str, Any]]:
        """Applications with their number of runs and last run date."""
        with self.db.read("list applications") as reader:
            return LS.applications(reader)

    def create_run(self, application: str, **options: Any) -> int:
        """Register a new run and its attributes; return the run id (:meth:`new_run`'s arguments)."""
        return self.new_run(application, **options).id

    def new_run(
        self,
        application: str,
        *,
        nprocs: int,
        root: str,
        problem_size: Any = None,
        attributes: dict[str, Any] | None = None,
        make_dir: Callable[[int], str] | None = None,
        created_at: datetime | None = None,
    ) -> RunRecord:
        """Register a new run and its attributes; return its record (what :meth:`run` would read back).

        The record is built from the values stored in the one transaction, without reading
        them again (a new run has no groups yet).

        Parameters
        ----------
        make_dir : callable, optional
            Called with the new run id inside the transaction; creates the run's directory
            and returns it relative to *root* (an error rolls the run back). Without it the
            run has no directory and is registered closed (catalog-only uses). A run made
            with a directory starts ``open`` with one writer (see :meth:`open_run`).
        created_at : datetime, optional
            The time recorded (default: now, UTC), given by a caller that records it
            elsewhere too (the meta-file).
        """
        encoded = encode_all(attributes)  # every key and value checked before the transaction
        created = created_at or utcnow()
        size_text = None if problem_size is None else json.dumps(problem_size, default=jsonable)
        rel_dir, state = None, "closed"
        with self.db.tx() as con:
            app_id = self.app_id(con, application, create=True)
            run_id = inserted_id(con.execute(
                S.runs.insert().values(
                    application_id=app_id,
                    created_at=created,
                    nprocs=int(nprocs),
                    problem_size=size_text,
                    root=str(root),
                )
            ))
            if encoded:  # a new run has no attributes to replace: one multi-row INSERT
                con.execute(S.attributes.insert(), [
                    dict(run_id=run_id, group_id=None, dataset_id=None, key=key, value_type=vtype, value_num=vnum,
                         value_str=vstr) for key, vtype, vnum, vstr in encoded])
            if make_dir is not None:
                rel_dir, state = make_dir(int(run_id)), "open"
                con.execute(S.runs.update().where(S.runs.c.id == run_id).values(dir=rel_dir, state=state, writers=1))
        return RunRecord(id=int(run_id), application=application, created_at=created, nprocs=int(nprocs),
                         problem_size=json.loads(size_text) if size_text else None, root=str(root), dir=rel_dir,
                         state=state, attributes={key: decode(vtype, vnum, vstr) for key, vtype, vnum, vstr in encoded})

    def restore_run(self, run_id: int, application: str, *, nprocs: int, root: str, directory: str,
                    problem_size: Any, attributes: dict[str, Any], created_at: datetime) -> None:
        """Register a run again under its own id, ``open`` with one writer as :meth:`new_run` leaves it
        (``sdm rebuild``, from the run's meta-file; :meth:`settle_run` gives it its state at the end)."""
        encoded = encode_all(attributes)
        size_text = None if problem_size is None else json.dumps(problem_size, default=jsonable)
        with self.db.tx() as con:
            con.execute(S.runs.insert().values(
                id=int(run_id), application_id=self.app_id(con, application, create=True), created_at=created_at,
                nprocs=int(nprocs), problem_size=size_text, root=str(root), dir=directory, state="open", writers=1))
            if encoded:
                con.execute(S.attributes.insert(), [
                    dict(run_id=int(run_id), group_id=None, dataset_id=None, key=key, value_type=vtype, value_num=vnum,
                         value_str=vstr) for key, vtype, vnum, vstr in encoded])

    def settle_run(self, run_id: int, live: Callable[[], bool]) -> str:
        """A rebuilt run's state: ``closed`` when no session writes it, else ``open`` if *live* says one does
        (``interrupted`` with no writer if not). Returns the state."""
        r = S.runs
        with self.db.tx() as con:
            writers = int(con.execute(sa.select(r.c.writers).where(r.c.id == int(run_id))).scalar_one())
            state = "closed" if writers <= 0 else ("open" if live() else "interrupted")
            con.execute(r.update().where(r.c.id == int(run_id))
                        .values(state=state, writers=writers if state == "open" else 0))
        return state

    # ------------------------------------------------------------- run states
    def open_run(self, run_id: int, claim: Callable[[], bool] | None = None) -> str:
        """Count one more session writing the run; returns the state it was in.

        Parameters
        ----------
        claim : callable
            Called inside the transaction (so sessions opening the run at once take
            turns): returns whether a live session already holds the run, then takes this
            session's hold on it. A run found ``open`` with no live session was
            interrupted: its writer count starts again from zero. None (a rebuild
            replaying the meta-file): the count goes on.
        """
        r = S.runs
        with self.db.tx() as con:
            state, writers = con.execute(
                sa.select(r.c.state, r.c.writers).where(r.c.id == int(run_id)).with_for_update()
            ).one()
            live = True if claim is None else claim()
            if state == "open" and not live:
                state, writers = "interrupted", 0
            con.execute(r.update().where(r.c.id == int(run_id)).values(state="open", writers=writers + 1))
        return str(state)

    def close_run(self, run_id: int) -> str:
        """One session stopped writing the run; the last one closes it. Returns the new state."""
        r = S.runs
        with self.db.tx() as con:
            writers = con.execute(sa.select(r.c.writers).where(r.c.id == int(run_id))).scalar_one()
            writers = max(int(writers) - 1, 0)
            state = "open" if writers else "closed"
            con.execute(r.update().where(r.c.id == int(run_id)).values(state=state, writers=writers))
        return state

    def mark_interrupted(self, run_id: int) -> None:
        """Record that a run found ``open`` has no live writer (its writers died)."""
        r = S.runs
        with self.db.tx() as con:
            con.execute(r.update().where(r.c.id == int(run_id), r.c.state == "open")
                        .values(state="interrupted", writers=0))

    def run(self, run_id: int, *, application: str | None = None, steps: bool = True) -> RunRecord:
        """Return a run with its groups and datasets (and their steps).

        Parameters
        ----------
        steps : bool
            Read every dataset's steps (default); ``False`` reads only their summary.

        Raises
        ------
        RunNotFoundError
            No such run (or it belongs to another application).
        """
        rid = checked_id(run_id)
        runs = [] if rid is None else self.load([rid], steps=steps)
        if not runs or (application is not None and runs[0].application != application):
            of = f" of application {application!r}" if application else ""
            owner = f"; run {run_id} is of application {runs[0].application!r}" if runs else ""
            raise RunNotFoundError(f"no run {run_id}{of} in catalog {self.url!r}{owner}")
        return runs[0]

    def latest_run(self, application: str | None, attributes: dict[str, Any] | None = None, *,
                   conditions: Iterable[Condition] = ()) -> RunRecord:
        """Return the newest run of *application* (None: any) whose attributes match.

        The database finds it (newest first, a page of candidates at a time); the record is
        what :meth:`find` returns for that run: with conditions, only the datasets that match
        them. :meth:`select_run` is what readers use: it refuses to guess among several.

        Raises
        ------
        ApplicationNotFoundError, RunNotFoundError
        InvalidArgumentError
            An attribute key or value is refused (see :mod:`sdm.catalog.values`).
        """
        conditions = list(conditions)
        conds = self._conditions(attributes, conditions)
        with self.db.read("look up the latest run") as con:
            for ids, only in self._matching(con, application, conds):
                if ids:  # ids[0]: the newest that matches
                    return L.load_runs(con, ids[:1], only=only)[0]
        raise self._no_match(application, attributes, conditions)

    def select_run(self, application: str | None, attributes: dict[str, Any] | None = None,
                   run: int | str | None = None, *, conditions: Iterable[Condition] = (),
                   advice: str = SEL.PYTHON_ADVICE) -> RunRecord:
        """The one run a reader means (the rule of :mod:`sdm.catalog.selection`).

        Parameters
        ----------
        application : str or None
            The application (None: any).
        attributes : dict, optional
            Conditions as for :meth:`find` (``{key: value}`` or ``{key: (op, value)}``).
        run : int, "latest" or None
            A run id (that run, of *application* when one is named; the conditions are not
            consulted), ``"latest"`` (the newest that matches) or None (exactly one must match).
        conditions : iterable of Condition
            Extra parsed conditions (what ``sdm show KEY=VALUE`` passes).
        advice : str
            How the caller chooses among several, for the message.

        Returns
        -------
        RunRecord
            As :meth:`find` returns it (with conditions, only the datasets that match).

        Raises
        ------
        AmbiguousRunError
            Several runs match and *run* is None: the message lists them, newest first.
        RunNotFoundError, ApplicationNotFoundError
        InvalidArgumentError
            A bad *run* or condition.
        """
        choice, conditions = SEL.run_choice(run), list(conditions)
        if isinstance(choice, int):
            return self.run(choice, application=application)
        if choice == SEL.LATEST:
            return self.latest_run(application, attributes, conditions=conditions)
        conds = self._conditions(attributes, conditions)
        with self.db.read("select a run") as con:
            first: list[int] = []
            only: dict[int, set[int]] = {}
            total = 0
            for ids, narrowed in self._matching(con, application, conds):
                total += len(ids)
                for rid in ids[: SEL.SHOWN - len(first)]:
                    first.append(rid)
                    if narrowed is not None:
                        only[rid] = narrowed[rid]
            runs = L.load_runs(con, first, only=None if not conds else only)
        if not runs:
            raise self._no_match(application, attributes, conditions)
        newest_first = sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)
        if total == 1:
            return newest_first[0]
        raise SEL.ambiguous(application, _selection_text(attributes, conditions), newest_first, total, advice)

    def _matching(self, con: RD.Reader, application: str | None, conds: Sequence[Condition]
                  ) -> Iterator[tuple[list[int], dict[int, set[int]] | None]]:
        """The runs that match, newest first, a page of candidates at a time: ``(ids, datasets that match)``."""
        q, params = self._id_query(con, application=application, conds=conds, newest_first=True)
        offset = 0
        while True:
            page = [int(i) for i in con.scalars(q, {**params, "limit": L.CHUNK, "offset": offset})]
            if not page:
                if offset == 0 and application is not None and not con.scalars(_APPLICATION, {"name": application}):
                    with self.db.connect() as sa_con:  # no candidate, no application: named as such (closest names)
                        self.app_id(sa_con, application, create=False)
                return
            yield self._narrow(con, page, conds)
            offset += L.CHUNK

    @staticmethod
    def _no_match(application: str | None, attributes: Any, conditions: Iterable[Condition]) -> RunNotFoundError:
        asked = _selection_text(attributes, conditions) or "attributes {}"
        of = repr(application) if application is not None else "any application"
        return RunNotFoundError(
            f"no run of {of} has {asked}; "
            "`sdm ls` lists the runs and `sdm show RUN` their attributes"
        )

    def find(
        self,
        *,
        application: str | None = None,
        run: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        attributes: dict[str, Any] | None = None,
        conditions: Iterable[Condition] = (),
        steps: bool = False,
        compression: Iterable[Condition | str] | str = (),
    ) -> list[RunRecord]:
        """Find runs (newest first) and, in each, the datasets that match.

        A dataset's attributes are its run's, overridden by its group's, overridden by
        its own; a dataset matches when those satisfy every condition.  Runs with no
        matching dataset are returned when the run itself matches every condition.

        The conditions are evaluated by the database over its attribute indexes (see
        :mod:`sdm.catalog.queries`), and only the runs found are read, so the time
        follows the size of the answer, not of the catalog.

        Parameters
        ----------
        application : str, optional
        run : int, optional
            Run id.
        since, until : datetime, optional
            Inclusive range of run creation times (naive datetimes are taken as UTC).
        attributes : dict, optional
            ``{key: value}`` for equality or ``{key: (op, value)}`` with op in
            ``= != < <= > >=``.  Values follow the limits of :mod:`sdm.catalog.values`;
            numpy scalars match like the Python values they hold (``np.int64(64)`` finds
            ``64``); NaN and integers outside int64 are refused, not silently unmatched.
        conditions : iterable of Condition
            Extra parsed conditions (what ``sdm find`` passes).
        steps : bool
            Also read every dataset's list of steps (``DatasetRecord.steps``). By default
            only their count, first and last step are read and ``steps`` is ``None``.
        compression : iterable of str or Condition
            What compression achieved (``"ratio>4"``, ``"max_error<1e-4"``; :data:`COMPRESSION_KEYS`, over all the
            dataset's steps): only compressed datasets whose ``ratio``, ``max_error``, ``stored``,
            ``nbytes`` and ``codec`` satisfy every one are kept, and only runs holding one.

        Raises
        ------
        InvalidArgumentError
            A condition, its key or value, or another argument is refused.
        CatalogError
            The catalog failed while reading.
        """
        conds = self._conditions(attributes, conditions)
        packed = _compression_conditions(compression)
        if run is not None:
            checked_id(run)  # validates
        for name, when in (("since", since), ("until", until)):
            if when is not None and not isinstance(when, datetime):
                raise InvalidArgumentError(f"{name} must be a datetime, got {type(when).__name__}")
        if application is not None and not isinstance(application, str):
            raise InvalidArgumentError(f"application must be a name (str), got {type(application).__name__}")
        with self.db.read("find runs") as con:
            q, params = self._id_query(con, application=application, run=run, since=since, until=until, conds=conds)
            ids, only = self._narrow(con, [int(i) for i in con.scalars(q, params)], conds)
            if packed:
                ids, only = _narrow_compressed(con, ids, only, packed)
            found = L.load_runs(con, ids, only=only, steps=steps)
        return sorted(found, key=lambda r: (r.created_at, r.id), reverse=True)  # as sdm ls lists them

    def list_runs(self, application: str, *, limit: int | None = None, offset: int = 0
                  ) -> tuple[list[RunRecord], dict[int, dict[str, int]], int]:
        """One page of an application's runs, newest first, for listings.

        Returns
        -------
        runs : list of RunRecord
            The page (newest first), with step summaries (``steps`` not read).
        totals : dict
            Per run id: ``datasets``, ``writes`` and committed ``bytes``, summed in SQL.
        total : int
            How many runs the application has.

        Raises
        ------
        ApplicationNotFoundError
        InvalidArgumentError
            *limit* below 1 or *offset* below 0.
        """
        for name, value, low in (("limit", limit, 1), ("offset", offset, 0)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise InvalidArgumentError(f"{name} must be an integer >= {low}, got {value!r}")
        with self.db.read("list runs") as reader:
            return LS.run_page(reader, application, self.url, limit=limit, offset=offset)

    @staticmethod
    def _conditions(attributes: Any, conditions: Iterable[Condition]) -> list[Condition]:
        """All conditions of a search, validated before any query runs."""
        conds = conditions_from(attributes)
        for c in conditions:
            if not isinstance(c, Condition):
                raise InvalidArgumentError(
                    f"conditions must be Condition objects (see sdm.catalog.parse_condition), got {c!r}"
                )
            conds.append(c)
        return conds

    @staticmethod
    def _id_query(
        con: RD.Reader,
        *,
        application: str | None = None,
        run: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        conds: Sequence[Condition] = (),
        newest_first: bool = False,
    ) -> tuple[str, dict[str, Any]]:
        """``SELECT runs.id`` (oldest first) of the candidate runs of a search, and its parameters."""
        shapes, params = Q.compile_conditions(conds)
        if run is not None:
            rid = checked_id(run)
            params["run"] = rid if rid is not None else 0  # no run has id 0
        filters = {"application": application, "since": None if since is None else _utc(since),
                   "until": None if until is None else _utc(until)}
        params.update((k, v) for k, v in filters.items() if v is not None)
        q = Q.candidates_query(con.dialect, shapes, application is not None, run is not None, since is not None,
                               until is not None, newest_first)
        return q, params

    def _narrow(self, con: RD.Reader, run_ids: list[int], conds: Sequence[Condition]
                ) -> tuple[list[int], dict[int, set[int]] | None]:
        """Which candidate runs match *conds* (in the order given), and the datasets that do in each.

        A run matches when its own attributes satisfy every condition or when one of its
        datasets' effective attributes do; only those datasets are kept (``None``: no
        condition, every dataset).
        """
        if not conds:
            return run_ids, None
        shapes, params = Q.compile_conditions(conds)
        by_run, by_dataset = Q.run_level_query(con.dialect, shapes), Q.datasets_query(con.dialect, shapes)
        only: dict[int, set[int]] = {}
        for part in L.chunks(run_ids):
            for rid in con.scalars(by_run, {**params, "run_ids": part}):
                only.setdefault(int(rid), set())  # the run itself matches: kept even with no dataset that does
            for row in con.rows(by_dataset, {**params, "run_ids": part}):
                only.setdefault(int(row["run_id"]), set()).add(int(row["id"]))
        return [i for i in run_ids if i in only], only

    def load(self, run_ids: list[int], **kw: Any) -> list[RunRecord]:
        """The runs *run_ids* as records, in one read (*kw*: see :func:`sdm.catalog.loading.load_runs`)."""
        with self.db.read("load runs") as con:
            return L.load_runs(con, run_ids, **kw)

    def counts(self) -> dict[str, int]:
        """Row counts of the main tables (used by tests and ``sdm ls``)."""
        out = {}
        with self.db.connect() as con:
            for t in (S.applications, S.runs, S.groups, S.datasets, S.attributes, S.files, S.writes, S.infos):
                out[t.name] = con.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
        return out


def _selection_text(attributes: Any, conditions: Iterable[Condition]) -> str:
    """What a selection asked for, as text: ``attributes {...}`` and/or the conditions."""
    parts = [f"attributes {attributes}"] if attributes else []
    parts += [repr(c) for c in conditions]
    return " and ".join(parts)



#: What :meth:`Runs.find`'s ``compression=`` conditions may name, per compressed dataset over its steps
COMPRESSION_KEYS = {
    "ratio": "array bytes over stored bytes",
    "max_error": "the largest error a lossy codec measured at write time (0 for lossless codecs)",
    "stored": "bytes stored", "nbytes": "array bytes", "codec": "the codec pipeline's text",
}
#: Per compressed dataset of some runs: its codec and its steps' sums (sdm.engine.compressed)
_COMPRESSION_FACTS = ('SELECT datasets.id AS id, groups.run_id AS run_id, MIN(writes.codec) AS codec, '
                      'SUM(writes.nbytes) AS nbytes, SUM(writes.stored_nbytes) AS stored, '
                      'MAX(writes.max_error) AS max_error FROM writes JOIN datasets ON datasets.id = writes.dataset_id '
                      'JOIN groups ON groups.id = datasets.group_id WHERE groups.run_id IN :run_ids '
                      'AND writes.codec IS NOT NULL GROUP BY datasets.id, groups.run_id')


def _compression_conditions(conditions: Iterable[Condition | str] | str) -> list[Condition]:
    """``find(compression=...)`` checked: conditions (``"ratio>4"`` or Condition objects) on :data:`COMPRESSION_KEYS`."""
    from .values import parse_condition

    out = []
    for c in [conditions] if isinstance(conditions, str) else conditions:
        if isinstance(c, str):
            c = parse_condition(c)
        if not isinstance(c, Condition):
            raise InvalidArgumentError(
                f"compression conditions must be Condition objects (see sdm.catalog.parse_condition), got {c!r}")
        if c.key not in COMPRESSION_KEYS:
            raise InvalidArgumentError(f"compression condition on {c.key!r}: the keys are "
                                       + ", ".join(f"{k} ({v})" for k, v in COMPRESSION_KEYS.items()))
        out.append(c)
    return out


def _narrow_compressed(con: RD.Reader, run_ids: list[int], only: dict[int, set[int]] | None,
                       conds: Sequence[Condition]) -> tuple[list[int], dict[int, set[int]]]:
    """The runs of *run_ids* holding a compressed dataset whose facts satisfy every condition, and those datasets
    (among *only*'s, when given)."""
    kept: dict[int, set[int]] = {}
    for part in L.chunks(run_ids):
        for row in con.rows(_COMPRESSION_FACTS, {"run_ids": part}):
            rid, did = int(row["run_id"]), int(row["id"])
            if only is not None and did not in only.get(rid, set()):
                continue
            stored, nbytes = int(row["stored"] or 0), int(row["nbytes"] or 0)
            facts = {"ratio": nbytes / stored if stored else float("inf"), "stored": stored, "nbytes": nbytes,
                     "codec": row["codec"], "max_error": float(row["max_error"] or 0.0)}
            if all(c.matches(facts[c.key]) for c in conds):
                kept.setdefault(rid, set()).add(did)
    return [i for i in run_ids if i in kept], kept
