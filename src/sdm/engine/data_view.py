"""The data view protocol of a group: which part of each dataset every rank holds (``group.data_view``).

Every rank first agrees on the view and the datasets (one exchange; ``make_group(view=...)``
has agreed already), then resolves each dataset's piece, checks the pieces of each shape
together (a gap or an overlap is an error on every rank), keeps the resolved views (one per
shape, dtype and order) and, in a writing session, records the view as the datasets' access
pattern. A :class:`~sdm.layout.ranked.Ranked` view has no pieces: it goes to
the ranked strategy (:func:`sdm.engine.ranked.set_view`).
"""

from __future__ import annotations

from typing import Sequence

from .. import _validate as check
from . import ranked as _ranked_io
from .._collective import agree, capture, root_call
from ..catalog.changes import DistributionSet
from ..dtypes import from_text
from ..errors import CollectiveMismatchError, DistributionError, InvalidArgumentError
from ..layout import Distribution, MapArray, Piece
from ..layout.agreement import agree_view, by_value, value_text
from ..layout.ranked import Ranked
from ..layout.views import ResolvedView
from .checks import _not_global
from .state import GroupState

__all__ = ["Viewing"]


class Viewing(GroupState):
    """The data view protocol of a group (mixed into :class:`~sdm.engine.group_engine.GroupEngine`)."""

    def _set_data_view(self, view: Distribution, datasets: Sequence[str] | None = None, *,
                       agreed: bool = False) -> None:
        """:meth:`sdm.Group.data_view`: resolve *view* for *datasets* (default all) on every rank and record it
        (collective).

        *agreed*: the view was already agreed on and checked against every dataset's shape
        by every rank (:func:`sdm.engine.groups.define_group`, for ``make_group(view=...)``),
        so those exchanges are not made again.
        """
        s = self.session
        names, failure = capture(lambda: list(self._datasets) if datasets is None else check.names(datasets, "datasets"),
                                 rank=s.rank)
        if not agreed:  # first, before any collective that depends on the kind: the same view everywhere
            agree_view(s.comm, view, f"data_view of group {self.name!r}", names)
            agree(s.comm, failure)
        assert names is not None
        if isinstance(view, Ranked):  # the same kind on every rank (agreed above)
            packed = [n for n in names if n in self._datasets and self.dataset(n).compression]
            if packed:  # alike on every rank: the names and the group's record are
                raise InvalidArgumentError(f"datasets {packed} of group {self.name!r} are compressed: a ranked view's "
                                           "rows are written as they come; compress datasets with views of boxes")
            return _ranked_io.set_view(self, names)

        def resolve() -> tuple[list[str], dict[str, Piece]]:
            if not isinstance(view, Distribution):
                raise InvalidArgumentError(
                    f"a data view must be a Distribution (Block, Cyclic, MapArray, ...), got {type(view).__name__}"
                )
            names = list(self._datasets) if datasets is None else check.names(datasets, "datasets")
            for n in names:
                rec = self.dataset(n)
                if n in self._ranked:
                    raise _not_global(n)
                if isinstance(view, MapArray) and rec.order == "F" and len(rec.shape) > 1:
                    raise DistributionError(
                        f"dataset {n!r} is stored in Fortran order; map-array views need C order "
                        "(rows with their components contiguous)"
                    )
            by_shape: dict[tuple[int, ...], Piece] = {}  # datasets of one shape share their piece (made once)
            for n in names:
                shape = tuple(self.dataset(n).shape)
                if shape not in by_shape:
                    by_shape[shape] = view.piece(shape, s.size, s.rank)
            return names, {n: by_shape[tuple(self.dataset(n).shape)] for n in names}

        resolved, failure = capture(resolve, rank=s.rank)
        listed = agree(s.comm, failure, resolved[0] if resolved else None)
        if any(n != listed[0] for n in listed):  # the walks below are collective
            raise CollectiveMismatchError(
                f"ranks set data views of different datasets ({by_value([value_text(n) for n in listed])}); every rank "
                "must name the same ones"
            )
        names, pieces = resolved  # type: ignore[misc]
        self._epoch += 1  # every rank is here: the views' layout keys change alike
        checked: set[tuple[int, ...]] = set() if not agreed else {tuple(self.dataset(n).shape) for n in names}
        for n in names:  # collective: every rank walks the same names
            shape = tuple(self.dataset(n).shape)
            if shape not in checked:
                checked.add(shape)
                _, failure = capture(view.check, shape, pieces[n], s.comm, rank=s.rank)
                agree(s.comm, failure)
        self._drop_views(names)
        for n in names:
            rec = self.dataset(n)
            layout = ("view", self.record.id, self._epoch, tuple(rec.shape), rec.dtype, rec.order)
            shared = self._shared.get(layout)
            if shared is None:
                shared = self._shared[layout] = ResolvedView(view, pieces[n], from_text(rec.dtype), rec.order,
                                                             layout=layout)
            self._views[n] = shared
        if s.mode != "r":
            ids = [self.dataset(n).id for n in names]
            root_call(s.comm, s.record, DistributionSet(tuple(ids), view.to_json()))
