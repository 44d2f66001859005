"""Finding runs in a session's catalog (rank 0; :meth:`sdm.Session.find` broadcasts the answer)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import _validate as check
from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from ..catalog import RunRecord
    from .commits import Commits

__all__ = ["find_runs"]


def find_runs(commits: Commits, *, application: Any, run: Any, since: Any, until: Any,
              attributes: Any) -> list[RunRecord]:
    """Rank 0: the arguments of :meth:`sdm.Session.find` checked, then :meth:`sdm.catalog.Catalog.find`.

    Raises
    ------
    InvalidArgumentError
    """
    kwargs: dict[str, Any] = dict(application=application, run=run, since=since, until=until, attributes=attributes)
    check.text(application, "application", optional=True)
    if run is not None:
        kwargs["run"] = check.integer(run, "run id", minimum=1)  # numpy integers too
    for value, what in ((since, "since"), (until, "until")):
        if value is not None and not isinstance(value, datetime):
            raise InvalidArgumentError(f"{what} must be a datetime.datetime, got {type(value).__name__}")
    check.mapping(attributes, "attributes")
    return commits.open_catalog().find(**kwargs)
