"""What ``sdm ls`` lists: the applications, and a page of an application's runs, as SQL text for a reader.

:meth:`Catalog.applications <sdm.catalog.Catalog.applications>` and
:meth:`Catalog.list_runs <sdm.catalog.Catalog.list_runs>` run these statements on the
catalog's :class:`~sdm.catalog.reader.Reader`. ``sdm ls`` of an SQLite catalog at the
current revision runs the very same ones through :mod:`sqlite3` alone
(:class:`Listing`), without SQLAlchemy, whose import alone takes longer than the whole
command should: nothing here imports it (:mod:`sdm.catalog.loading` and
:mod:`sdm.catalog.reader` neither). Any other catalog (PostgreSQL, a file at another
revision, damaged, missing) is opened as a :class:`~sdm.catalog.Catalog`, which says
what is wrong.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..config import catalog_url
from ..errors import ApplicationNotFoundError, CatalogError
from ..suggest import closest
from .loading import load_runs, run_totals, utc
from .own import sqlite_connection, sqlite_path
from .reader import Reader, transaction
from .records import RunRecord
from .urls import mask_urls, redact_url

__all__ = ["applications", "run_page", "Listing"]

_APPLICATIONS = ('SELECT applications."name" AS "name", count(runs.id) AS "runs", max(runs."created_at") AS '
                 '"created_at" FROM applications LEFT OUTER JOIN runs ON runs."application_id" = applications.id '
                 'GROUP BY applications.id, applications."name" ORDER BY applications."name"')
_APPLICATION = 'SELECT applications.id AS "id" FROM applications WHERE applications."name" = :name'
_NAMES = 'SELECT applications."name" AS "name" FROM applications'
_COUNT = 'SELECT count(*) AS "n" FROM runs WHERE runs."application_id" = :app'
_PAGE = ('SELECT runs.id AS "id" FROM runs WHERE runs."application_id" = :app ORDER BY runs."created_at" DESC, '
         'runs.id DESC LIMIT :limit OFFSET :offset')
_NO_LIMIT = 2**63 - 1  # LIMIT for "every row": SQLite takes no OFFSET without a LIMIT, PostgreSQL no negative one


def applications(reader: Reader) -> list[dict[str, Any]]:
    """Applications with their number of runs and last run date (``name``, ``runs``, ``last_run``), by name."""
    return [{"name": row["name"], "runs": int(row["runs"]),
             "last_run": utc(row["created_at"]) if row["created_at"] is not None else None}
            for row in reader.rows(_APPLICATIONS)]


def run_page(reader: Reader, application: str, url: str, *, limit: int | None, offset: int
             ) -> tuple[list[RunRecord], dict[int, dict[str, int]], int]:
    """One page of *application*'s runs, newest first, their totals, and how many runs it has in all.

    See :meth:`sdm.catalog.Catalog.list_runs` (whose work this is); *url* is the catalog's
    URL as messages show it.

    Raises
    ------
    ApplicationNotFoundError
        No such application (the message names the closest ones).
    """
    found = reader.scalars(_APPLICATION, {"name": application})
    if not found:
        known = reader.scalars(_NAMES)
        raise ApplicationNotFoundError(f"no application {application!r} in catalog {url!r}"
                                       f"{closest(application, known)}")
    app = int(found[0])
    total = int(reader.scalars(_COUNT, {"app": app})[0])
    ids = [int(i) for i in reader.scalars(_PAGE, {"app": app, "limit": _NO_LIMIT if limit is None else limit,
                                                   "offset": offset})]
    runs = load_runs(reader, ids)[::-1] if ids else []
    return runs, run_totals(reader, ids), total


class Listing:
    """An SQLite catalog at the current revision, read with :mod:`sqlite3` alone for ``sdm ls``.

    Made by :meth:`open` (None for any other catalog). It answers what ``sdm ls`` asks
    of a :class:`~sdm.catalog.Catalog` (:meth:`applications`, :meth:`list_runs`, ``url``)
    and writes nothing: recording that an ``open`` run is in fact interrupted is left to
    a :class:`~sdm.catalog.Catalog`.
    """

    def __init__(self, connection: sqlite3.Connection, url: str) -> None:
        self._con = connection
        self.url = redact_url(url)

    @classmethod
    def open(cls, url: str) -> Listing | None:
        """The listing of the catalog *url* (a URL, or the path of an SQLite file), or None when it is not an
        SQLite file at the current revision (or cannot be read that way: the full catalog will say why)."""
        url = catalog_url(url)
        path = sqlite_path(url) if url.startswith("sqlite:///") else None
        if path is None or not path.is_file():
            return None
        try:
            found = sqlite_connection(Path(path))
        except sqlite3.Error:  # damaged: the full catalog says so, in its words
            return None
        return None if found is None else cls(found[0], url)

    @contextmanager
    def _read(self, what: str) -> Iterator[Reader]:
        try:
            with transaction(self._con, "sqlite") as reader:
                yield reader
        except sqlite3.Error as exc:
            text = str(exc).strip().splitlines()
            raise CatalogError(f"catalog {self.url!r} failed to {what}: "
                               f"{mask_urls(text[0]) if text else type(exc).__name__}") from None

    def applications(self) -> list[dict[str, Any]]:
        """As :meth:`sdm.catalog.Catalog.applications`."""
        with self._read("list applications") as reader:
            return applications(reader)

    def list_runs(self, application: str, *, limit: int | None = None, offset: int = 0
                  ) -> tuple[list[RunRecord], dict[int, dict[str, int]], int]:
        """As :meth:`sdm.catalog.Catalog.list_runs` (*limit* and *offset* checked by the caller)."""
        with self._read("list runs") as reader:
            return run_page(reader, application, self.url, limit=limit, offset=offset)

    def close(self) -> None:
        """Close the connection."""
        self._con.close()
