"""A lazy array follows Python's sequence protocol: ``len``, ``for x in g["T"]`` ending after the last step, and an
integer index past the end raising ``IndexError`` (as numpy does), in one process."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import sdm
from sdm.errors import IndexOutOfRangeError, InvalidArgumentError

STEPS = (0, 4, 9)
SHAPE = (3, 4)


def _values(step: int) -> np.ndarray:
    return np.arange(12.0).reshape(SHAPE) * (step + 1)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("lazy")
    with sdm.open("lazy", "w", root=root, catalog=str(root / "catalog.db"), comm=MPI.COMM_SELF) as s:
        g = s.make_group("g", ["T", "empty"], dtype="f8", shape=SHAPE)
        for step in STEPS:
            g.write("T", step, _values(step))
    with sdm.open("lazy", "r", root=root, catalog=str(root / "catalog.db"), comm=MPI.COMM_SELF, run="latest") as r:
        yield r.group("g")


def test_iteration_yields_each_step_and_ends(group) -> None:
    T = group["T"]
    assert len(T) == 3 and T.shape == (3, *SHAPE)
    got = [x for x in T]
    assert len(got) == len(STEPS)
    for x, step in zip(got, STEPS):
        np.testing.assert_array_equal(x, _values(step))
    assert [float(x[1, 2]) for x in T] == [6.0 * (s + 1) for s in STEPS]  # iterating again starts over
    rows = list(T.at(9))  # one step iterates over its first dimension, as numpy does
    assert len(T.at(9)) == 3 and len(rows) == 3
    np.testing.assert_array_equal(np.stack(rows), _values(9))
    assert list(group["empty"]) == [] and len(group["empty"]) == 0
    first, *rest = T  # unpacking, zip and enumerate all stop at the end
    assert len(rest) == 2 and [i for i, _ in enumerate(T)] == [0, 1, 2]


def test_an_index_past_the_end_is_an_index_error(group) -> None:
    T = group["T"]
    for key, message in (
        (3, "index of dataset 'T' 3: index 3 is out of range for dimension 0 of extent 3"),
        ((-4,), "index of dataset 'T' (-4,): index -4 is out of range for dimension 0 of extent 3"),
        ((0, 3), "index of dataset 'T' (0, 3): index 3 is out of range for dimension 1 of extent 3"),
    ):
        with pytest.raises(IndexError) as info:  # numpy's class, and SDM's
            T[key]
        assert type(info.value) is IndexOutOfRangeError and isinstance(info.value, InvalidArgumentError)
        assert str(info.value) == message
    with pytest.raises(IndexError):
        T.at(4)[5]
    np.testing.assert_array_equal(T[-1], _values(9))  # the array is still usable
