"""Truncating a run: every step after a given one erased, in one catalog transaction (collective).

The ranks agree on the arguments and close their data files (no rank keeps a handle on
a file about to be deleted or cut); rank 0 records the
:class:`~sdm.catalog.changes.Truncated` change (journaled in the run's meta-file, then
committed) and, after its commit, deletes the files left without data and cuts the
freed tails (:func:`sdm.segments.release_space`). A cut file loses its trailer: the
session writes a new one at close.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Sequence

from .. import _validate as check
from .._collective import agree, capture, root_call
from ..catalog import Truncation
from ..catalog.changes import Truncated
from ..segments import release_space
from ..storage import check_name
from ..storage.confine import confine
from .groups import same_calls

if TYPE_CHECKING:
    from .session_state import SessionState

__all__ = ["truncate"]


def truncate(s: SessionState, after_step: Any, groups: Sequence[str] | None) -> Truncation:
    """Erase every step after *after_step* of the run's groups (all, or those named): what was erased.

    Raises
    ------
    InvalidArgumentError, GroupNotFoundError, RunStateError, CatalogError, CollectiveMismatchError
    """
    def checked() -> tuple[int, list[str] | None]:
        step = check.integer(after_step, "after_step")
        return step, None if groups is None else [check_name(n, "group") for n in check.names(groups, "groups")]

    args, failure = capture(checked, rank=s.rank)
    same_calls(agree(s.comm, failure, args), "truncate", ("after_step", "groups"))
    assert args is not None
    s.files.close_all()  # no rank keeps a handle on a file about to be deleted or cut

    def erase() -> Truncation:
        done = s._commits.record(Truncated(s.run_id, args[0], None if args[1] is None else tuple(args[1]), 1,
                                  partial(confine, s.root, s.run_dir)))
        # the run's meta-file records the committed truncation here (see sdm.segments)
        return release_space(s.root, done, s.run_dir)

    done: Truncation = root_call(s.comm, erase)
    s.described.update(rel for rel, _ in done.cut_files)  # a cut file loses its trailer: a new one at close
    for name in done.groups:
        if name in s._groups:
            s._groups[name].engine._truncated(done.after_step)
    return done
