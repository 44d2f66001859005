"""Refused attributes raise the same InvalidArgumentError on every rank and change nothing;
numpy scalars find runs like Python values (SQLite catalog; the catalog layer itself is
tested on SQLite and PostgreSQL in tests/integration/test_catalog_limits.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import sdm

from _reference import catalog_counts

INT_RANGE = "[-9223372036854775808, 9223372036854775807]"


@pytest.fixture
def setup(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/cat.db"
    s = sdm.open("attrs", root=mpi_tmp, catalog=url, attributes={"nx": np.int64(64), "case": np.str_("demo")})
    g = s.make_group("g", ["a", "b"], dtype="f8", shape=(4, 4), level=3)
    yield s, g, url
    s.close()


def _raises_everywhere(comm, message, fn):
    with pytest.raises(sdm.InvalidArgumentError) as info:
        fn()
    assert type(info.value) is sdm.InvalidArgumentError
    assert re.fullmatch(re.escape(message) + r"( \[rank \d+\])?", str(info.value)), str(info.value)
    seen = comm.allgather((type(info.value).__name__, str(info.value)))
    assert len(set(seen)) == 1, seen


@pytest.mark.parametrize("where", ["open", "session", "group", "datasets", "find", "open-r"])
@pytest.mark.parametrize("attrs, message", [
    ({"k" * 300: 1}, "attribute key '" + "k" * 56 + "... has 300 characters; keys have at most 255"),
    ({"n": 2**64}, f"attribute 'n': integer 18446744073709551616 is outside the signed 64-bit range {INT_RANGE}; "
                   "store it as a string (or a float) instead"),
    ({"s": "a\x00"}, "attribute 's': string value holds a NUL character; strings are text without NUL"),
    ({"x": np.float32("nan")}, "attribute 'x': NaN cannot be stored or searched (it equals nothing); "
                               "use a finite number, inf, or a string such as 'nan'"),
    ({"v": [1]}, "attribute 'v': value [1] of type list is not supported; use bool, int, float or str"),
], ids=["long-key", "huge-int", "nul", "nan", "list"])
def test_refused_on_every_rank(comm, setup, mpi_tmp, where, attrs, message):
    s, g, url = setup
    before = catalog_counts(comm, url)
    calls = {
        "open": lambda: sdm.open("attrs", "w", root=mpi_tmp, catalog=url, attributes=attrs),
        "session": lambda: s.set_attributes(attrs),
        "group": lambda: g.set_attributes(attrs),
        "datasets": lambda: g.set_attributes(attrs, datasets=["b"]),
        "find": lambda: s.find("attrs", attributes=attrs),
        "open-r": lambda: sdm.open("attrs", "r", catalog=url, attributes=attrs),
    }
    _raises_everywhere(comm, message, calls[where])
    assert catalog_counts(comm, url) == before


def test_attributes_not_a_mapping(comm, setup):
    s, g, url = setup
    before = catalog_counts(comm, url)
    _raises_everywhere(comm, "attributes must be a dict of {key: value}, got list", lambda: s.set_attributes([1]))
    _raises_everywhere(comm, "attributes must be a dict of {key: value}, got str", lambda: g.set_attributes("a=1"))
    assert catalog_counts(comm, url) == before


def test_numpy_scalars_find_the_run(comm, setup, mpi_tmp):
    s, g, url = setup
    g.set_attributes({"dt": np.float32(0.25)}, datasets=["b"])
    runs = s.find("attrs", attributes={"nx": np.int64(64), "case": np.str_("demo"), "dt": np.float32(0.25)})
    assert [(r.id, [d.name for grp in r.groups for d in grp.datasets]) for r in runs] == [(s.run_id, ["b"])]
    with sdm.open("attrs", "r", catalog=url, attributes={"nx": np.uint8(64)}) as r:
        assert r.run_id == s.run_id
