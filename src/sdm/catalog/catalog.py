"""The catalog API: one class over SQLite and PostgreSQL, chosen by URL.

Only rank 0 of an SDM session opens a :class:`Catalog`; the other ranks receive what
they need by broadcast.  Every method is one short transaction.
"""

from __future__ import annotations

import errno
import json
import sqlite3
import threading
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.exc import SQLAlchemyError

from ..errors import (
    ApplicationNotFoundError,
    CatalogDamagedError,
    CatalogError,
    CatalogUnavailableError,
    GroupExistsError,
    GroupNotFoundError,
    InvalidArgumentError,
    RunNotFoundError,
    StepExistsError,
)
from ..config import catalog_url
from ..suggest import closest
from . import database as D
from .bulk import insert_rows
from . import info_rows as IR
from . import infos as I
from . import loading as L
from . import queries as Q
from . import reader as RD
from . import schema as S
from .records import DatasetSpec, ExtentRecord, FileRecord, GroupRecord, RunRecord, Truncation, WriteRecord
from .urls import mask_urls, misparse, redact_url, scrub
from .loading import utc as _utc
from . import selection as SEL
from .values import Condition, conditions_from, decode, encode_all, loaded_numpy

__all__ = ["Catalog", "normalize_url", "redact_url", "DatasetSpec"]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _inserted_id(result: Any) -> int:
    """The primary key of the row an ``INSERT`` made."""
    key = result.inserted_primary_key
    assert key is not None, "an INSERT of one row returns its key"
    return int(key[0])


def normalize_url(url: str) -> str:
    """Return the SQLAlchemy URL for a catalog URL or the path of an SQLite catalog file.

    ``postgresql://`` and ``postgres://`` select the psycopg (3) driver; ``sqlite:///path``
    is used as it is; a plain path (``runs/catalog.db``) means that SQLite file
    (see :func:`sdm.config.catalog_url`).

    Raises
    ------
    CatalogUnavailableError
        For any other scheme, for text that is neither a URL nor a plain path, and for a
        PostgreSQL URL that a connection library would split elsewhere than it reads (a
        raw ``@`` in the password: the message says to percent-encode it).
    """
    url = catalog_url(url) if isinstance(url, str) else url
    if not isinstance(url, str) or "://" not in url:
        raise CatalogUnavailableError(
            f"catalog URL {redact_url(url)!r} is not a URL; use sqlite:///path/to/catalog.db or "
            "postgresql://user@host:port/dbname"
        )
    scheme, rest = url.split("://", 1)
    if scheme in {"postgresql", "postgres", "postgresql+psycopg"}:
        why = misparse(url)
        if why is not None:
            raise CatalogUnavailableError(f"catalog URL {redact_url(url)!r} cannot be used as written: {why}")
        return "postgresql+psycopg://" + rest
    if scheme == "sqlite":
        return url
    if not all(ch.isalnum() or ch in "+.-" for ch in scheme):  # 'user:pw@host://...' is no scheme
        raise CatalogUnavailableError(
            f"catalog URL {redact_url(url)!r} has no valid scheme; use sqlite:/// or postgresql://"
        )
    raise CatalogUnavailableError(
        f"catalog URL scheme {scheme!r} is not supported; use sqlite:/// or postgresql://"
    )


# the statements of a read's lookups, as text for the lean read path (see sdm.catalog.reader)
_WRITES = ('SELECT ' + ", ".join(f'writes."{c.name}"' for c in S.writes.c) + ', files."path" FROM writes '
           'JOIN files ON files.id = writes.file_id WHERE writes.dataset_id = :d')
_LOOKUP_WRITE = _WRITES + ' AND writes."step" = :s'
_EXTENTS = ('SELECT ' + ", ".join(f'extents."{c.name}"' for c in S.extents.c) + ', files."path" FROM extents '
            'JOIN files ON files.id = extents.file_id WHERE extents.write_id IN :ids ORDER BY extents.write_id, extents.seq')
_APPLICATION = "SELECT applications.id FROM applications WHERE applications.name = :name"
_CALIBRATION = ('SELECT ' + ", ".join(f'io_calibrations."{c.name}"' for c in S.io_calibrations.c) +
                ' FROM io_calibrations WHERE io_calibrations.target = :target '
                'ORDER BY io_calibrations.created_at DESC, io_calibrations.id DESC LIMIT 1')


class Catalog:
    """Metadata catalog of runs, groups, datasets, attributes, files and writes.

    Parameters
    ----------
    url : str
        ``sqlite:///path/to/catalog.db`` (created if missing) or
        ``postgresql://user[:password]@host[:port]/dbname`` (the database must exist).
    create : bool
        Create the schema when the catalog is empty (default).  Readers pass ``False``.

    Raises
    ------
    CatalogUnavailableError
        The URL cannot be opened.
    CatalogVersionError
        The catalog holds a schema version this SDM does not know.
    CatalogDamagedError
        The catalog file is empty, not a database, or damaged (never replaced by a new one).

    Notes
    -----
    :attr:`url` is the URL as it may be shown, its password masked (``user:***@``); the
    real one lives only in the engine's connection settings.

    A full disk under the catalog raises :class:`~sdm.errors.CatalogError` with
    ``errno.ENOSPC`` from any method that writes, the catalog left as it was; a reader
    (``create=False``) of an SQLite catalog on a full disk still opens and reads it
    (see :mod:`sdm.catalog.database`).
    """

    @property
    def url(self) -> str:
        """The catalog URL with any password masked (safe for messages and logs)."""
        return self._shown_url

    @url.setter
    def url(self, value: str) -> None:
        self._shown_url = redact_url(value)

    def __repr__(self) -> str:
        return f"Catalog({self.url!r})"

    def __init__(self, url: str, *, create: bool = True) -> None:
        url = catalog_url(url) if isinstance(url, str) else url  # a plain path: that SQLite file
        self.url = url
        self._file_ids: dict[tuple[int, str], int] = {}
        self._batch: Connection | None = None  # the transaction of batch(), while one is open
        self._id: str | None = None
        #: Whether this object created the catalog (an SQLite file it made: no run, no calibration yet)
        self.created = False
        sa_url = normalize_url(url)
        self._engine: Engine | None = None
        #: The catalog's own SQLite connection (lean reads, see sdm.catalog.reader), one user at a time
        self._own: sqlite3.Connection | None = None
        self._own_lock = threading.Lock()
        shown = repr(self.url)
        path = D.sqlite_path(sa_url)
        #: An SQLite catalog's file, and its engine's URL (made when a method first needs it; no secret in it)
        self._sqlite_file, self._sqlite_url = path, (sa_url if path is not None else None)
        error: CatalogError | None = None
        try:
            if path is None:
                self._engine = D.make_engine(sa_url)
            else:
                self._id = self._prepare_sqlite(path, shown, create)
                self.created = self._id is not None
                if not self.created:  # at the current revision: read without an engine (made when needed)
                    found = D.sqlite_connection(path)
                    if found is not None:
                        self._own, self._id = found
            if not self.created and self._own is None:  # a file made just now holds the head revision
                try:
                    self._id = D.ensure_schema(self.engine, shown, create=create)
                except CatalogError as exc:
                    if exc.errno != errno.ENOSPC or path is None or create:
                        raise
                    self._engine = D.reading_engine(sa_url)  # a reader on a full disk: no -shm file to make
                    self._id = D.ensure_schema(self._engine, shown, create=False)
        except CatalogError:
            self._dispose()
            raise
        except (SQLAlchemyError, OSError, ValueError, sqlite3.Error) as exc:
            self._dispose()
            if D.is_damage(exc):
                error = CatalogDamagedError(
                    f"catalog {shown} is damaged: {scrub(_short(exc), url)}; restore it from a backup")
            else:
                error = CatalogUnavailableError(f"cannot open catalog {shown}: {scrub(_short(exc), url)}")
        if error is not None:  # raised outside the handler: the driver's error (its text unscrubbed) is not chained
            raise error

    @staticmethod
    def _prepare_sqlite(path: Path, shown: str, create: bool) -> str | None:
        """Check an SQLite catalog file, or create it (atomically) when a writer needs it.

        Returns the new catalog's id when this call created it, else None.
        """
        if path.is_dir():
            raise CatalogUnavailableError(
                f"catalog {shown}: {path} is a directory; name the catalog file, e.g. {str(path / 'catalog.db')!r}"
            )
        if path.exists():
            D.check_sqlite_file(path, shown)
            return None
        parent = path.parent
        if not create:
            if parent.is_dir():
                raise CatalogUnavailableError(f"catalog {shown}: no catalog file {path}")
            raise CatalogUnavailableError(f"catalog {shown}: directory {parent} does not exist")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CatalogUnavailableError(f"catalog {shown}: cannot create {parent}: {exc}") from exc
        return D.create_sqlite_file(path, shown)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine of the catalog (the process's, made at first use; see :func:`database.make_engine`)."""
        if self._engine is None:
            assert self._sqlite_url is not None, "other catalogs make their engine when opened"
            self._engine = D.make_engine(self._sqlite_url)
        return self._engine

    def _dispose(self) -> None:
        own, self._own = getattr(self, "_own", None), None
        if own is not None:
            with self._own_lock:
                own.close()
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.dispose()

    @property
    def id(self) -> str:
        """The catalog's unique id (recorded in the directory of every run it creates)."""
        if self._id is None:
            self._id = D.catalog_id(self.engine)
        return self._id

    def integrity_check(self) -> list[str]:
        """Run the database engine's integrity check; returns the problems found (none: empty)."""
        return D.integrity_check(self.engine)

    @property
    def schema_version(self) -> str:
        """The schema revision in use (an Alembic revision id)."""
        return S.SCHEMA_VERSION

    def close(self) -> None:
        """Release the catalog's connections (its own and the engine's pool)."""
        self._dispose()

    def _tx(self) -> Any:
        """A write transaction (inside :meth:`batch`: the batch's, committed with it)."""
        if self._batch is not None:
            return nullcontext(self._batch)
        return D.write_transaction(self.engine)

    def _connect(self) -> Any:
        """A connection to read with (inside :meth:`batch`: the batch's, which sees its changes)."""
        if self._batch is not None:
            return nullcontext(self._batch)
        return self.engine.connect()

    @contextmanager
    def batch(self) -> Iterator[Connection]:
        """One write transaction for every change and read made in the block (``sdm rebuild``: one run).

        The methods called inside it commit nothing themselves: the block's end commits
        them all, an exception rolls them all back.
        """
        if self._batch is not None:
            yield self._batch
            return
        try:
            with D.write_transaction(self.engine) as con:
                self._batch = con
                yield con
        except BaseException:
            self._file_ids.clear()  # ids of files the rollback took back
            raise
        finally:
            self._batch = None

    # ------------------------------------------------------------ applications
    def _app_id(self, con, name: str, *, create: bool) -> int:
        row = con.execute(sa.select(S.applications.c.id).where(S.applications.c.name == name)).first()
        if row is not None:
            return row[0]
        if not create:
            known = con.execute(sa.select(S.applications.c.name)).scalars()
            raise ApplicationNotFoundError(f"no application {name!r} in catalog {self.url!r}{closest(name, known)}")
        try:
            with con.begin_nested():
                return con.execute(
                    S.applications.insert().values(name=name, created_at=_now())
                ).inserted_primary_key[0]
        except SAIntegrityError:  # created concurrently by another job
            return con.execute(sa.select(S.applications.c.id).where(S.applications.c.name == name)).scalar_one()

    def applications(self) -> list[dict[str, Any]]:
        """Applications with their number of runs and last run date."""
        a, r = S.applications, S.runs
        q = (
            sa.select(a.c.name, sa.func.count(r.c.id), sa.func.max(r.c.created_at))
            .select_from(a.outerjoin(r, r.c.application_id == a.c.id))
            .group_by(a.c.id, a.c.name)
            .order_by(a.c.name)
        )
        with self._connect() as con:
            return [
                {"name": n, "runs": c, "last_run": _utc(t) if t else None} for n, c, t in con.execute(q)
            ]

    # -------------------------------------------------------------------- runs
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
        created = created_at or _now()
        size_text = None if problem_size is None else json.dumps(problem_size, default=_jsonable)
        rel_dir, state = None, "closed"
        with self._tx() as con:
            app_id = self._app_id(con, application, create=True)
            run_id = con.execute(
                S.runs.insert().values(
                    application_id=app_id,
                    created_at=created,
                    nprocs=int(nprocs),
                    problem_size=size_text,
                    root=str(root),
                )
            ).inserted_primary_key[0]
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
        size_text = None if problem_size is None else json.dumps(problem_size, default=_jsonable)
        with self._tx() as con:
            con.execute(S.runs.insert().values(
                id=int(run_id), application_id=self._app_id(con, application, create=True), created_at=created_at,
                nprocs=int(nprocs), problem_size=size_text, root=str(root), dir=directory, state="open", writers=1))
            if encoded:
                con.execute(S.attributes.insert(), [
                    dict(run_id=int(run_id), group_id=None, dataset_id=None, key=key, value_type=vtype, value_num=vnum,
                         value_str=vstr) for key, vtype, vnum, vstr in encoded])

    def settle_run(self, run_id: int, live: Callable[[], bool]) -> str:
        """A rebuilt run's state: ``closed`` when no session writes it, else ``open`` if *live* says one does
        (``interrupted`` with no writer if not). Returns the state."""
        r = S.runs
        with self._tx() as con:
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
        with self._tx() as con:
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
        with self._tx() as con:
            writers = con.execute(sa.select(r.c.writers).where(r.c.id == int(run_id))).scalar_one()
            writers = max(int(writers) - 1, 0)
            state = "open" if writers else "closed"
            con.execute(r.update().where(r.c.id == int(run_id)).values(state=state, writers=writers))
        return state

    def mark_interrupted(self, run_id: int) -> None:
        """Record that a run found ``open`` has no live writer (its writers died)."""
        r = S.runs
        with self._tx() as con:
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
        rid = _run_id(run_id)
        runs = [] if rid is None else self._load([rid], steps=steps)
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
        with self._read("look up the latest run") as con:
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
        with self._read("select a run") as con:
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
                    with self._connect() as sa_con:  # no candidate, no application: named as such (closest names)
                        self._app_id(sa_con, application, create=False)
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

        Raises
        ------
        InvalidArgumentError
            A condition, its key or value, or another argument is refused.
        CatalogError
            The catalog failed while reading.
        """
        conds = self._conditions(attributes, conditions)
        if run is not None:
            _run_id(run)  # validates
        for name, when in (("since", since), ("until", until)):
            if when is not None and not isinstance(when, datetime):
                raise InvalidArgumentError(f"{name} must be a datetime, got {type(when).__name__}")
        if application is not None and not isinstance(application, str):
            raise InvalidArgumentError(f"application must be a name (str), got {type(application).__name__}")
        with self._read("find runs") as con:
            q, params = self._id_query(con, application=application, run=run, since=since, until=until, conds=conds)
            ids, only = self._narrow(con, [int(i) for i in con.scalars(q, params)], conds)
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
        r = S.runs
        with self._reading("list runs"), self._connect() as con:
            app_id = self._app_id(con, application, create=False)
            total = con.execute(sa.select(sa.func.count()).select_from(r).where(r.c.application_id == app_id)).scalar_one()
            q = (sa.select(r.c.id).where(r.c.application_id == app_id)
                 .order_by(r.c.created_at.desc(), r.c.id.desc()).offset(offset))
            ids = [int(i) for i in con.execute(q if limit is None else q.limit(limit)).scalars()]
            runs = L.load_runs(RD.Reader.over(con), ids)[::-1]
            return runs, L.run_totals(con, ids), int(total)

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
            rid = _run_id(run)
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

    def _load(self, run_ids: list[int], **kw: Any) -> list[RunRecord]:
        with self._read("load runs") as con:
            return L.load_runs(con, run_ids, **kw)

    @contextmanager
    def _read(self, what: str) -> Iterator[RD.Reader]:
        """A :class:`~sdm.catalog.reader.Reader` for one call's reads: on the lean read path, or
        inside :meth:`batch` on the batch's transaction; a database failure raised as
        :class:`CatalogError` (URL masked; ``errno.ENOSPC`` for a full disk)."""
        try:
            if self._batch is not None:
                yield RD.Reader.over(self._batch)
            elif self._own is not None:
                with self._own_lock, RD.transaction(self._own, "sqlite") as reader:
                    yield reader
            else:
                with RD.lean(self.engine) as reader:
                    yield reader
        except SQLAlchemyError as exc:
            raise CatalogError(f"catalog {self.url!r} failed to {what}: {_short(exc)}") from None
        except self._driver_error() as exc:
            full = D.disk_full(exc, self._sqlite_file)
            raise CatalogError(f"catalog {self.url!r} failed to {what}: {_short(exc)}",
                               errno=errno.ENOSPC if full else None) from None

    def _driver_error(self) -> type[Exception]:
        """The base class of the driver's exceptions."""
        if self._sqlite_file is not None or self._engine is None:
            return sqlite3.Error
        return self._engine.dialect.loaded_dbapi.Error

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Turn a database failure while reading into :class:`CatalogError` (URL masked)."""
        try:
            yield
        except SQLAlchemyError as exc:
            raise CatalogError(f"catalog {self.url!r} failed to {what}: {_short(exc)}") from None

    # -------------------------------------------------------------- attributes
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
        rid = _run_id(run_id)
        try:
            with self._tx() as con:
                if rid is None or con.execute(sa.select(S.runs.c.id).where(S.runs.c.id == rid)).first() is None:
                    raise RunNotFoundError(f"no run {run_id} in catalog {self.url!r}")
                if group_id is None:
                    self._put_attributes(con, rid, None, [None], encoded)
                else:
                    owners = ([None] if on_group else []) + list(dataset_ids)
                    self._put_attributes(con, rid, group_id, owners, encoded)
        except SQLAlchemyError as exc:
            raise CatalogError(
                f"catalog {self.url!r} refused the attributes of run {run_id}: {_short(exc)}"
            ) from None

    # ------------------------------------------------------------------ groups
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
        with self._tx() as con:
            row = con.execute(
                sa.select(S.groups).where(S.groups.c.run_id == run_id, S.groups.c.name == name)
            ).mappings().first()
            if row is None:
                pos = con.execute(
                    sa.select(sa.func.count()).select_from(S.groups).where(S.groups.c.run_id == run_id)
                ).scalar_one()
                gid = con.execute(
                    S.groups.insert().values(run_id=run_id, name=name, level=int(level), position=pos, kind=kind,
                                             steps_per_file=steps_per_file, archive=archive, subfiles=subfiles)
                ).inserted_primary_key[0]
                rows = [dict(group_id=gid, name=spec.name, position=i, dtype=spec.dtype,
                             shape=json.dumps(list(spec.shape)), storage_order=spec.order,
                             dims=None if spec.dims is None else json.dumps(list(spec.dims)))
                        for i, spec in enumerate(specs)]
                if rows:  # every dataset in one executemany
                    con.execute(S.datasets.insert(), rows)
        group = self.group(run_id, name)
        existing = [DatasetSpec(d.name, d.dtype, d.shape, d.order, d.dims) for d in group.datasets]
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
        rid = _run_id(run_id)
        found = [] if rid is None else self._load([rid], group=name, steps=True)
        if not found:
            raise RunNotFoundError(f"no run {run_id} in catalog {self.url!r}")
        if found[0].groups:
            return found[0].groups[0]
        names = [g.name for g in self.run(run_id, steps=False).groups]
        raise GroupNotFoundError(f"run {run_id} has no group {name!r}; its groups are {names}{closest(name, names)}")

    def set_distribution(self, dataset_ids: Sequence[int], distribution: dict[str, Any] | None) -> None:
        """Record the writer's data view (the paper's access pattern) for datasets (None: none)."""
        text = None if distribution is None else json.dumps(distribution)
        ids = [int(i) for i in dataset_ids]
        with self._tx() as con:
            for start in range(0, len(ids), _CHUNK):  # bounded parameters however many datasets
                con.execute(
                    S.datasets.update()
                    .where(S.datasets.c.id.in_(ids[start:start + _CHUNK]))
                    .values(distribution=text)
                )

    # ------------------------------------------------------------------- infos
    def set_info(self, run_id: int, name: str, array: Any, *, group_id: int | None = None,
                 dataset_id: int | None = None, step: int | None = None, created_at: datetime | None = None) -> None:
        """Store an info (a named array) on a run, a group, a dataset or one step of a dataset.

        An info of the same name at the same place is replaced. See :mod:`sdm.catalog.infos`.

        Parameters
        ----------
        run_id : int
        name : str
        array : array_like or InfoValue
            Checked by :func:`sdm.catalog.infos.info_value`.
        group_id, dataset_id : int, optional
            The group (and its dataset) the info belongs to; neither: the run.
        step : int, optional
            With ``dataset_id``: the step of the dataset the info belongs to.
        created_at : datetime, optional
            The time to record (the meta-file's); default now.

        Raises
        ------
        InvalidNameError, UnsupportedDtypeError, InvalidArgumentError
            A bad name, dtype, size, or place (nothing is stored).
        RunNotFoundError, GroupNotFoundError, DatasetNotFoundError
        CatalogError
        """
        value = I.info_value(name, array)
        rid = _run_id(run_id)
        if rid is None:
            raise RunNotFoundError(f"no run {run_id} in catalog {self.url!r}")
        try:
            with self._tx() as con:
                IR.put(con, rid, name, value, group_id=group_id, dataset_id=dataset_id, step=step,
                      created_at=created_at or _now(), url=self.url)
        except SQLAlchemyError as exc:
            raise CatalogError(f"catalog {self.url!r} refused info {name!r} of run {run_id}: {_short(exc)}") from None

    def info(self, run_id: int, name: str, *, group: str | None = None, dataset: str | None = None,
             step: int | None = None) -> I.InfoRecord:
        """The info *name* of a run, or of its group, dataset or step (names), as an ``InfoRecord``.

        ``record.array()`` is the numpy array; ``record.data`` its bytes.

        Raises
        ------
        NotFoundError
            No such info (a ``KeyError``).
        IntegrityError
            Its bytes do not match their CRC-32.
        """
        rid = _run_id(run_id)
        with self._reading(f"read info {name!r}"), self._connect() as con:
            return IR.find(con, -1 if rid is None else rid, name, (group, dataset, step), self.url)

    def infos(self, run_id: int, *, group: str | None = None, dataset: str | None = None, step: int | None = None,
              everywhere: bool = False, data: bool = True) -> list[I.InfoRecord]:
        """The infos (``InfoRecord``) of a run's place (default: the run itself), or with *everywhere* all of them.

        Ordered: the run's, then by group and dataset position, step and name. With
        ``data=False`` the records carry no bytes.

        Raises
        ------
        RunNotFoundError
            No such run.
        IntegrityError
            An info's bytes do not match their CRC-32.
        """
        rid = _run_id(run_id)
        with self._reading("read infos"), self._connect() as con:
            if rid is None or con.execute(sa.select(S.runs.c.id).where(S.runs.c.id == rid)).first() is None:
                raise RunNotFoundError(f"no run {run_id} in catalog {self.url!r}")
            return IR.load(con, rid, place=None if everywhere else (group, dataset, step), data=data)

    # ------------------------------------------------------------------ writes
    def lookup_write(self, dataset_id: int, step: int) -> WriteRecord | None:
        """Return where *step* of a dataset was written, or ``None``."""
        with self._read("look up a write") as con:
            rows = con.rows(_LOOKUP_WRITE, {"d": int(dataset_id), "s": int(step)})
            if not rows:
                return None
            return _write_record(rows[0], _read_extents(con, [rows[0]["id"]]) if rows[0]["extents"] else None)

    def dataset_writes(self, dataset_id: int) -> dict[int, WriteRecord]:
        """Every step of a dataset with where it was written (one query): ``{step: WriteRecord}``."""
        with self._read("read a dataset's writes") as con:
            rows = con.rows(_WRITES, {"d": int(dataset_id)})
            parts = _read_extents(con, [row["id"] for row in rows if row["extents"]])
            return {int(row["step"]): _write_record(row, parts) for row in rows}

    def file_end(self, run_id: int, path: str) -> int:
        """First free byte of a data file: the end of its last recorded write."""
        sp, f = S.spans(), S.files
        with self._connect() as con:
            end = con.execute(
                sa.select(sa.func.max(sp.c.offset + sp.c.nbytes))
                .select_from(sp.join(f, f.c.id == sp.c.file_id))
                .where(f.c.run_id == run_id, f.c.path == path)
            ).scalar()
        return int(end or 0)

    def reserve(self, run_id: int, requests: Sequence[tuple]) -> list[int | None]:
        """Reserve fresh file space for writes, atomically (one transaction).

        Each request is ``(path, level, nbytes, whole_file)``, optionally with an alignment: the
        offset is then the first multiple of it at or past the high-water mark (subfile
        extents, :mod:`sdm.storage.subfiles`). A whole-file request (level 1:
        one file per dataset, step and version) creates the file's row and owns the whole
        file; it gets ``None`` when the path is already taken (by a version written
        before, or by another job), and the caller asks again with another path. Other
        requests get the offset where their ``nbytes`` start: the file's high-water mark
        is raised by ``nbytes`` in the same transaction, so two writers, in this job or in
        another, never receive the same bytes. Space reserved but never committed (a crash)
        stays unreferenced until ``sdm gc``.

        Returns
        -------
        list of int or None
            The offset of each request, or ``None`` for a whole-file path already taken.
        """
        f = S.files
        out: list[int | None] = [None] * len(requests)
        now = _now()
        shared: dict[int, list[tuple[int, int, int]]] = {}  # file id -> (request, nbytes, alignment), in order
        with self._tx() as con:
            for i, (path, level, nbytes, whole_file, *rest) in enumerate(requests):
                key = (int(run_id), path)
                file_id = self._file_ids.get(key)
                if file_id is None or whole_file:
                    row = {"run_id": run_id, "path": path, "level": int(level), "created_at": now,
                           "alloc_end": int(nbytes) if whole_file else 0}
                    made = con.execute(_insert_new(con, f, row).returning(f.c.id)).scalar()
                    if whole_file:  # the file is this write's alone, or taken
                        out[i] = None if made is None else 0
                        if made is not None:
                            self._file_ids[key] = int(made)
                        continue
                    file_id = made if made is not None else con.execute(_FILE_ID, {"run_id": run_id, "path": path}).scalar_one()
                    self._file_ids[key] = int(file_id)
                shared.setdefault(int(file_id), []).append((i, int(nbytes), int(rest[0]) if rest else 1))
            for file_id, wanted in shared.items():  # one statement per file (two with alignments)
                if all(align == 1 for _, _, align in wanted):
                    total = sum(n for _, n, _ in wanted)
                    at = int(con.execute(_GROW, {"fid": file_id, "grow": total}).scalar_one()) - total
                    for i, n, _ in wanted:
                        out[i], at = at, at + n
                    continue
                at = int(con.execute(_GROW, {"fid": file_id, "grow": 0}).scalar_one())  # the row locked
                for i, n, align in wanted:
                    start = (at + align - 1) // align * align
                    out[i], at = start, start + n
                con.execute(_SET_END, {"fid": file_id, "end": at})
        return out

    def give_back(self, run_id: int, unused: Sequence[tuple[str, int, int]]) -> int:
        """Give back space reserved ahead and not used: ``(path, start, end)`` lowers the file's mark from
        *end* to *start*, only where it is still *end* (nobody reserved after it); one transaction.

        Returns
        -------
        int
            The files whose mark was lowered.
        """
        f = S.files
        lowered = 0
        with self._tx() as con:
            for path, start, end in unused:
                lowered += con.execute(f.update().where(f.c.run_id == int(run_id), f.c.path == path,
                                                        f.c.alloc_end == int(end)).values(alloc_end=int(start))).rowcount
        return lowered

    def reserved_ends(self, run_id: int) -> dict[str, int]:
        """Each level-2/3 data file's high-water mark (``files.alloc_end``): where its reserved space ends."""
        f = S.files
        with self.engine.connect() as con:
            return {str(p): int(e) for p, e in con.execute(
                sa.select(f.c.path, f.c.alloc_end).where(f.c.run_id == run_id, f.c.level != 1))}

    def record_write(self, *, run_id: int, **write: Any) -> None:
        """Commit one write; see :meth:`record_writes` for the fields."""
        self.record_writes(run_id, [write])

    def record_writes(self, run_id: int, writes: Sequence[dict[str, Any]]) -> None:
        """Commit the writes of one step in one transaction: all of them or none.

        Each write is a dict with ``dataset_id, step, path, level, offset, nbytes,
        checksum, checksum_algo, method, seconds, nprocs, overwrite`` and optionally
        ``reason``, ``version`` and ``copy`` (a write to the archive tier: its verified
        copy, ``tier, location, size, checksum, verified_at``, recorded with it). The file's row is made by :meth:`reserve` (or here,
        for callers that place bytes themselves). A new step is inserted (a duplicate is
        caught by the unique constraint, not a query). An overwrite (``version`` > 1)
        switches the step's row to the new bytes only if the row is still the version
        it replaces (``version - 1``), so two jobs overwriting one step cannot both win.

        Raises
        ------
        StepExistsError
            A step exists and its write does not say overwrite (another writer got there
            first), or another job overwrote it meanwhile.
        """
        now = _now()
        new_ids: dict[tuple[int, str], int] = {}
        inserts: list[dict[str, Any]] = []
        summaries: dict[int, list[int]] = {}
        try:
            with self._tx() as con:
                for w in writes:
                    key = (int(run_id), w["path"])
                    file_id = self._file_ids.get(key) or new_ids.get(key)
                    if file_id is None:
                        file_id = con.execute(_FILE_ID, {"run_id": run_id, "path": w["path"]}).scalar()
                    if file_id is None:
                        file_id = con.execute(
                            S.files.insert(),
                            {"run_id": run_id, "path": w["path"], "level": int(w["level"]),
                             "created_at": w.get("written_at") or now,
                             "alloc_end": int(w["offset"]) + int(w["nbytes"])},
                        ).inserted_primary_key[0]
                    new_ids[key] = file_id
                    version = int(w.get("version", 1))
                    params = dict(
                        dataset_id=w["dataset_id"],
                        step=int(w["step"]),
                        file_id=file_id,
                        offset=int(w["offset"]),
                        nbytes=int(w["nbytes"]),
                        checksum=w["checksum"],
                        checksum_algo=w["checksum_algo"],
                        method=w["method"],
                        reason=w.get("reason"),
                        seconds=float(w["seconds"]),
                        nprocs=int(w["nprocs"]),
                        written_at=w.get("written_at") or now,  # the meta-file's time, when it stamped one
                        version=version,
                        extents=len(w.get("extents") or ()),
                    )
                    if w["overwrite"] and w.get("replaces") is not None:
                        _flush(con, inserts, summaries)  # the row it replaces may be among them
                        where = {"w_dataset": w["dataset_id"], "w_step": int(w["step"]), "w_version": int(w["replaces"])}
                        if con.execute(_UPDATE_WRITE, {**params, **where}).rowcount != 1:
                            raise StepExistsError(
                                f"step {w['step']} of dataset id {w['dataset_id']} was overwritten or removed by "
                                "another job while this write ran; nothing was recorded (read it again and retry)"
                            )
                    else:  # new steps go in together (one executemany), before any row that reads them back
                        inserts.append(params)
                        _summarize(summaries, params)
                    if w.get("extents") or (w["overwrite"] and w.get("replaces") is not None):
                        _flush(con, inserts, summaries)
                        self._put_extents(con, run_id, w, now, new_ids)
                    if w.get("copy"):  # written to the archive tier: the object is the file's copy there
                        from .copies import upsert_copy

                        upsert_copy(con, file_id, **{**w["copy"], "state": "verified"})
                _flush(con, inserts, summaries)
        except SAIntegrityError as exc:
            text = str(exc.orig)
            if "uq_writes_dataset_step" in text or "writes.dataset_id, writes.step" in text:
                which = ", ".join(f"step {w['step']} of dataset id {w['dataset_id']}" for w in writes)
                raise StepExistsError(f"{which} is already recorded; pass overwrite=True to replace it") from None
            raise CatalogError(f"catalog {self.url!r} refused the write record: {_short(exc)}") from None
        self._file_ids.update(new_ids)

    def _put_extents(self, con: Connection, run_id: int, w: dict[str, Any], now: datetime,
                     new_ids: dict[tuple[int, str], int]) -> None:
        """The extents of a recorded write (a subfiled step), replacing those of the version it overwrote.

        Each of ``w["extents"]`` is a dict with ``path, offset, nbytes, start, checksum,
        checksum_algo``; their files' rows were made by :meth:`reserve`.
        """
        e = S.extents
        wid = con.execute(sa.select(S.writes.c.id).where(S.writes.c.dataset_id == int(w["dataset_id"]),
                                                          S.writes.c.step == int(w["step"]))).scalar_one()
        con.execute(e.delete().where(e.c.write_id == wid))
        rows = []
        for seq, x in enumerate(w.get("extents") or ()):
            key = (int(run_id), x["path"])
            file_id = self._file_ids.get(key) or new_ids.get(key) or con.execute(
                _FILE_ID, {"run_id": run_id, "path": x["path"]}).scalar()
            if file_id is None:
                made = con.execute(S.files.insert(), {
                    "run_id": run_id, "path": x["path"], "level": int(w["level"]), "created_at": now,
                    "alloc_end": int(x["offset"]) + int(x["nbytes"])}).inserted_primary_key
                file_id = made[0] if made else None
            if file_id is None:
                raise CatalogError(f"catalog {self.url!r} did not record the subfile {x['path']}")
            new_ids[key] = int(file_id)
            rows.append(dict(write_id=wid, seq=seq, file_id=file_id, offset=int(x["offset"]), nbytes=int(x["nbytes"]),
                             start=int(x["start"]), checksum=x["checksum"], checksum_algo=x["checksum_algo"]))
        if rows:
            con.execute(e.insert(), rows)

    def extents(self, write_ids: Sequence[int]) -> dict[int, tuple[ExtentRecord, ...]]:
        """The extents of subfiled writes by write id (one query per thousand ids)."""
        with self._read("read extents") as con:
            return _read_extents(con, write_ids)

    def truncate(self, run_id: int, after_step: int, groups: Sequence[str] | None = None, *,
                 writers: int | None = 0, confine: Callable[[str, str], Any] | None = None) -> Truncation:
        """Erase every step after *after_step* of a run's groups (all, or those named), in one transaction.

        The rows, the datasets' step summaries, each group's truncation point (new steps
        must come after it) and the files' space (see :mod:`sdm.catalog.truncation`).
        The files themselves are the caller's to change, after this commit
        (:func:`sdm.segments.release_space`).

        Parameters
        ----------
        run_id : int
        after_step : int
            The last step kept (``>= 0``).
        groups : sequence of str, optional
            The groups to truncate (default: every group of the run).
        writers : int or None
            Writing sessions the caller holds on the run itself (``Session.truncate``: 1;
            None: no check, a rebuild replaying a truncation made when it was allowed).
        confine : callable, optional
            ``confine(path, record)``, called before the commit for every file given back;
            raising refuses the truncation, nothing changed (see
            :func:`sdm.catalog.truncation.truncate`).

        Returns
        -------
        Truncation
            What was erased.

        Raises
        ------
        InvalidArgumentError
            *after_step* is not an integer ``>= 0``, or *groups* not a list of names.
        RunNotFoundError, GroupNotFoundError
        RunStateError
            Another session is writing the run.
        IntegrityError
            From *confine*: a file given back lies outside the run's directory.
        """
        from .truncation import truncate

        try:
            step = _run_id(after_step)  # an int64 (numpy integers too)
        except InvalidArgumentError:
            step = None
        if step is None or step < 0:
            raise InvalidArgumentError(f"after_step must be an integer >= 0, got {after_step!r}")
        if groups is not None and (isinstance(groups, str) or not all(isinstance(n, str) for n in groups)):
            raise InvalidArgumentError(f"groups must be a list of group names, got {groups!r}")
        rid = _run_id(run_id)
        if rid is None:
            raise RunNotFoundError(f"no run {run_id} in catalog {self.url!r}")
        try:
            with self._tx() as con:
                done = truncate(con, rid, step, groups, writers, self.url, confine)
                IR.drop_steps_after(con, rid, step, groups)  # the infos of the erased steps go with them
        except SQLAlchemyError as exc:
            raise CatalogError(f"catalog {self.url!r} failed to truncate run {run_id}: {_short(exc)}") from None
        for path in done.removed_files:
            self._file_ids.pop((rid, path), None)
        return done

    def drop_file(self, run_id: int, path: str) -> None:
        """Forget a data file that no committed write refers to (after ``sdm gc`` removed it)."""
        f, w, e = S.files, S.writes, S.extents
        with self._tx() as con:
            con.execute(f.delete().where(f.c.run_id == int(run_id), f.c.path == path,
                                         ~sa.exists().where(w.c.file_id == f.c.id),
                                         ~sa.exists().where(e.c.file_id == f.c.id)))
        self._file_ids.pop((int(run_id), path), None)

    def lower_alloc_end(self, run_id: int, path: str, end: int) -> None:
        """Lower a file's high-water mark to *end* (after ``sdm gc`` cut its unreferenced tail).

        Never below the end of a committed write of the file.
        """
        f, sp = S.files, S.spans()
        with self._tx() as con:
            used = con.execute(
                sa.select(sa.func.coalesce(sa.func.max(sp.c.offset + sp.c.nbytes), 0))
                .select_from(sp.join(f, f.c.id == sp.c.file_id)).where(f.c.run_id == int(run_id), f.c.path == path)
            ).scalar_one()
            con.execute(f.update().where(f.c.run_id == int(run_id), f.c.path == path)
                        .values(alloc_end=max(int(end), int(used))))

    def writes(self, run_id: int, paths: Sequence[str] | None = None) -> list[tuple[str, str, WriteRecord]]:
        """Every write of a run (or those with bytes in its files *paths*: a subfiled row's extents count) as
        ``(group, dataset, record)``, by file then offset."""
        w, f, d, g = S.writes, S.files, S.datasets, S.groups
        q = (
            sa.select(w, f.c.path, d.c.name.label("dname"), g.c.name.label("gname"))
            .select_from(
                w.join(f, f.c.id == w.c.file_id)
                .join(d, d.c.id == w.c.dataset_id)
                .join(g, g.c.id == d.c.group_id)
            )
            .where(f.c.run_id == run_id, *(() if paths is None else (sa.or_(f.c.path.in_(list(paths)), w.c.id.in_(
                sa.select(S.extents.c.write_id).select_from(S.extents.join(f, f.c.id == S.extents.c.file_id))
                .where(f.c.run_id == run_id, f.c.path.in_(list(paths))))),)))
            .order_by(f.c.path, w.c.offset)
        )
        with self._connect() as con:
            rows = con.execute(q).mappings().all()
            parts = _read_extents(RD.Reader.over(con), [row["id"] for row in rows if row["extents"]])
            return [(row["gname"], row["dname"], _write_record(row, parts)) for row in rows]

    def files(self, run_id: int) -> list[FileRecord]:
        """The data files of a run with their number of writes and bytes."""
        sp, f = S.spans(), S.files
        q = (
            sa.select(f.c.path, f.c.level, sa.func.count(sp.c.write_id), sa.func.coalesce(sa.func.sum(sp.c.nbytes), 0))
            .select_from(f.outerjoin(sp, sp.c.file_id == f.c.id))
            .where(f.c.run_id == run_id)
            .group_by(f.c.id, f.c.path, f.c.level)
            .order_by(f.c.path)
        )
        with self._connect() as con:
            return [FileRecord(p, lv, int(n), int(b)) for p, lv, n, b in con.execute(q)]

    # ------------------------------------------------------------ calibration
    def save_calibration(
        self, target: str, nprocs: int, constants: dict[str, Any], samples: Any = None
    ) -> int:
        """Store measured cost-model constants for a storage target; return the row id."""
        with self._tx() as con:
            return int(
                con.execute(
                    S.io_calibrations.insert().values(
                        target=target,
                        nprocs=int(nprocs),
                        constants=json.dumps(constants),
                        samples=None if samples is None else json.dumps(samples, default=_jsonable),
                        created_at=_now(),
                    )
                ).inserted_primary_key[0]
            )

    def latest_calibration(self, target: str) -> dict[str, Any] | None:
        """The newest constants stored for *target* (with ``nprocs`` and ``created_at``), or None."""
        with self._read("read the latest calibration") as con:
            rows = con.rows(_CALIBRATION, {"target": target})
        if not rows:
            return None
        row = rows[0]
        return {
            "id": row["id"],
            "target": row["target"],
            "nprocs": row["nprocs"],
            "created_at": _utc(row["created_at"]).isoformat(),
            "constants": json.loads(row["constants"]),
        }

    def counts(self) -> dict[str, int]:
        """Row counts of the main tables (used by tests and ``sdm ls``)."""
        out = {}
        with self._connect() as con:
            for t in (S.applications, S.runs, S.groups, S.datasets, S.attributes, S.files, S.writes, S.infos):
                out[t.name] = con.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
        return out


_FILE_ID = sa.select(S.files.c.id).where(
    S.files.c.run_id == sa.bindparam("run_id"), S.files.c.path == sa.bindparam("path")
)
#: Raise a file's high-water mark by ``grow`` bytes, returning the new mark (locks the row).
_GROW = S.files.update().where(S.files.c.id == sa.bindparam("fid")).values(
    alloc_end=S.files.c.alloc_end + sa.bindparam("grow", type_=sa.BigInteger)).returning(S.files.c.alloc_end)
_SET_END = S.files.update().where(S.files.c.id == sa.bindparam("fid")).values(
    alloc_end=sa.bindparam("end", type_=sa.BigInteger))
_FIRST = sa.bindparam("s_first", type_=sa.BigInteger)
_LAST = sa.bindparam("s_last", type_=sa.BigInteger)
#: New steps in the dataset's summary, all those of one call together: ``s_count`` steps from ``s_first`` to
#: ``s_last``, ``s_nbytes`` bytes (an overwrite leaves it: a step of a dataset always has its size).
_NEW_STEPS = S.datasets.update().where(S.datasets.c.id == sa.bindparam("s_dataset")).values(
    nsteps=S.datasets.c.nsteps + sa.bindparam("s_count", type_=sa.BigInteger),
    first_step=sa.case((sa.or_(S.datasets.c.first_step.is_(None), S.datasets.c.first_step > _FIRST), _FIRST),
                       else_=S.datasets.c.first_step),
    last_step=sa.case((sa.or_(S.datasets.c.last_step.is_(None), S.datasets.c.last_step < _LAST), _LAST),
                      else_=S.datasets.c.last_step),
    nbytes_written=S.datasets.c.nbytes_written + sa.bindparam("s_nbytes", type_=sa.BigInteger),
)
_UPDATE_WRITE = S.writes.update().where(
    S.writes.c.dataset_id == sa.bindparam("w_dataset"),
    S.writes.c.step == sa.bindparam("w_step"),
    S.writes.c.version == sa.bindparam("w_version"),
)


def _summarize(summaries: dict[int, list[int]], row: dict[str, Any]) -> None:
    """Add a new step's row to its dataset's pending summary ``[count, first, last, nbytes]``."""
    step, nbytes = row["step"], row["nbytes"]
    s = summaries.get(row["dataset_id"])
    if s is None:
        summaries[row["dataset_id"]] = [1, step, step, nbytes]
    else:
        s[0] += 1
        s[1] = min(s[1], step)
        s[2] = max(s[2], step)
        s[3] += nbytes


def _flush(con: Connection, inserts: list[dict[str, Any]], summaries: dict[int, list[int]]) -> None:
    """Insert the new steps gathered (one executemany) and add them to their datasets' summaries (one update per
    dataset, whatever its number of new steps); empties both."""
    if inserts:
        insert_rows(con, S.writes, inserts)
        con.execute(_NEW_STEPS, [{"s_dataset": d, "s_count": n, "s_first": first, "s_last": last, "s_nbytes": b}
                                 for d, (n, first, last, b) in summaries.items()])
        inserts.clear()
        summaries.clear()


def _insert_new(con: Connection, table: sa.Table, row: dict[str, Any]) -> sa.Insert:
    """``INSERT`` that does nothing when the row's unique key exists (another job made it)."""
    if con.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table).values(**row).on_conflict_do_nothing()
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table).values(**row).on_conflict_do_nothing()


_CHUNK = 500  # ids per IN (...) list where a list of ids is given by the caller

_ID_MAX = 2**63 - 1


def _run_id(value: Any) -> int | None:
    """A run id as int; ``None`` when it is an integer no run can have (outside int64).

    Raises
    ------
    InvalidArgumentError
        Not an integer.
    """
    np = loaded_numpy()
    numpy_bool, numpy_int = (np.bool_, np.integer) if np is not None else ((), ())
    if isinstance(value, (bool, numpy_bool)) or not isinstance(value, (int, numpy_int)):
        raise InvalidArgumentError(f"a run id is an integer, got {value!r} of type {type(value).__name__}")
    value = int(value)
    return value if -_ID_MAX - 1 <= value <= _ID_MAX else None


def _read_extents(con: RD.Reader, write_ids: Sequence[int]) -> dict[int, tuple[ExtentRecord, ...]]:
    """The extents of the writes *write_ids*, in order (one query per :data:`~sdm.catalog.loading.CHUNK` ids)."""
    found: dict[int, list[ExtentRecord]] = {}
    for part in L.chunks(sorted({int(i) for i in write_ids})):
        for row in con.rows(_EXTENTS, {"ids": part}):
            found.setdefault(int(row["write_id"]), []).append(ExtentRecord(
                path=row["path"], offset=int(row["offset"]), nbytes=int(row["nbytes"]), start=int(row["start"]),
                checksum=row["checksum"], checksum_algo=row["checksum_algo"]))
    return {k: tuple(v) for k, v in found.items()}


def _write_record(row, extents: dict[int, tuple[ExtentRecord, ...]] | None = None) -> WriteRecord:
    return WriteRecord(
        dataset_id=row["dataset_id"],
        step=int(row["step"]),
        path=row["path"],
        offset=int(row["offset"]),
        nbytes=int(row["nbytes"]),
        checksum=row["checksum"],
        checksum_algo=row["checksum_algo"],
        method=row["method"],
        seconds=float(row["seconds"]),
        nprocs=int(row["nprocs"]),
        written_at=_utc(row["written_at"]),
        reason=row["reason"],
        version=int(row["version"]),
        extents=(extents or {}).get(int(row["id"]), ()) if row["extents"] else (),
    )


def _jsonable(obj: Any) -> Any:
    """numpy scalars and arrays in problem sizes become plain JSON."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"problem_size holds {type(obj).__name__}, which is not JSON")


def _selection_text(attributes: Any, conditions: Iterable[Condition]) -> str:
    """What a selection asked for, as text: ``attributes {...}`` and/or the conditions."""
    parts = [f"attributes {attributes}"] if attributes else []
    parts += [repr(c) for c in conditions]
    return " and ".join(parts)


def _short(exc: BaseException) -> str:
    """The first line of a database error, any URL in it masked."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return mask_urls(text[0]) if text else type(exc).__name__
