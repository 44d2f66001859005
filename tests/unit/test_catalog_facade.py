"""The shape of :class:`sdm.catalog.Catalog`: a facade whose methods are its stores' methods.

Every public method of a store (runs, groups, writes, infos, calibrations) is a method of
the facade with the same signature and documentation, and a call through the facade
reaches the store of the same catalog (checked on a real SQLite catalog; the counts of SQL
statements per operation are the MPI tests' and the engine's).
"""

from __future__ import annotations

import inspect

import pytest

from sdm.catalog.calibrations import Calibrations
from sdm.catalog.catalog import Catalog
from sdm.catalog.groups import Groups
from sdm.catalog.info_rows import Infos
from sdm.catalog.runs import Runs
from sdm.catalog.writes import Writes

#: Public methods that the stores offer one another (and sdm.catalog.irregular), not callers of the catalog
_INTERNAL = {(Runs, "app_id"), (Runs, "load")}

_STORES = (Runs, Groups, Writes, Infos, Calibrations)


def _methods(store: type) -> list[str]:
    return [name for name, value in vars(store).items()
            if inspect.isfunction(value) and not name.startswith("_") and (store, name) not in _INTERNAL]


@pytest.mark.parametrize("store", _STORES, ids=lambda s: s.__name__)
def test_every_store_method_is_a_catalog_method(store: type) -> None:
    for name in _methods(store):
        facade = vars(Catalog).get(name)
        assert facade is not None, f"Catalog has no {name} of {store.__name__}"
        assert inspect.signature(facade) == inspect.signature(getattr(store, name)), name
        assert facade.__doc__ == getattr(store, name).__doc__, name
        assert facade.__qualname__ == f"Catalog.{name}"


def test_no_two_stores_share_a_method_name() -> None:
    names = [name for store in _STORES for name in _methods(store)]
    assert len(names) == len(set(names))


def test_a_call_reaches_the_store_of_its_own_catalog(tmp_path) -> None:
    one, two = Catalog(f"sqlite:///{tmp_path}/one.db"), Catalog(f"sqlite:///{tmp_path}/two.db")
    try:
        rid = one.create_run("app", nprocs=2, root=str(tmp_path))
        assert one.run(rid).application == "app"
        assert [a["name"] for a in one.applications()] == ["app"]
        assert two.applications() == []
        assert one.reserve(rid, [("a.dat", 2, 8, False)]) == [0]
        assert one.reserved_ends(rid) == {"a.dat": 8}
        assert two.counts()["files"] == 0
        assert one._writes is not two._writes and one._writes.db is one._db
    finally:
        one.close()
        two.close()


def test_a_batch_rolled_back_forgets_the_files_it_made(tmp_path) -> None:
    cat = Catalog(f"sqlite:///{tmp_path}/c.db")
    try:
        rid = cat.create_run("app", nprocs=1, root=str(tmp_path))
        with pytest.raises(RuntimeError), cat.batch():
            assert cat.reserve(rid, [("a.dat", 2, 8, False)]) == [0]
            raise RuntimeError("rolled back")
        assert cat.reserved_ends(rid) == {}
        assert cat.reserve(rid, [("a.dat", 2, 4, False)]) == [0]  # the file's row made again, not a stale id
        assert cat.reserved_ends(rid) == {"a.dat": 4}
    finally:
        cat.close()
