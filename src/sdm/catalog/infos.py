"""Infos in the catalog: named homogeneous arrays kept as metadata (the paper's PDS infos).

An info is a small array (a material table, a units vector) attached to a run, a group,
a dataset or one step of a dataset, and stored whole in the table ``infos``: its dtype
(:func:`sdm.dtypes.dtype_text`), its shape (JSON), its bytes (C order, in the byte order
of the dtype) and their CRC-32. An info is named like a dataset
(:func:`sdm.storage.check_name`) and is unique per place and name: setting it again
replaces it.

Infos hold ``bool``, integer, float and complex values and fixed-width strings (``S<n>``,
``U<n>``), of at most :data:`MAX_BYTES` bytes; anything else is refused with
:class:`~sdm.errors.UnsupportedDtypeError` or :class:`~sdm.errors.InvalidArgumentError`.
numpy loads only when an array is made or checked, and SQLAlchemy never (every rank
checks infos; the rows are :mod:`sdm.catalog.info_rows`, rank 0's).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import InvalidArgumentError, UnsupportedDtypeError
from ..storage.naming import check_name

__all__ = ["MAX_BYTES", "KINDS", "Place", "InfoValue", "InfoRecord", "info_value", "place_text", "crc_text"]

#: The largest info, in bytes of its array (16 MiB); larger arrays belong in datasets.
MAX_BYTES = 16 * 1024 * 1024

#: numpy kinds an info may hold: bool, signed and unsigned integer, float, complex, byte and unicode strings.
KINDS = "biufcSU"

#: Where an info is attached: ``(group, dataset, step)`` names; ``(None, None, None)`` is the run.
Place = tuple[str | None, str | None, int | None]


def crc_text(data: bytes) -> str:
    """The CRC-32 (zlib) of *data* as 8 lowercase hex digits (an info's ``checksum``)."""
    return f"{zlib.crc32(data) & 0xFFFFFFFF:08x}"


def place_text(group: str | None, dataset: str | None, step: int | None) -> str:
    """Where an info is attached, in words: ``run``, ``group 'g'``, ``dataset 'g/d'``, ``step 3 of 'g/d'``."""
    if group is None:
        return "run"
    if dataset is None:
        return f"group {group!r}"
    if step is None:
        return f"dataset '{group}/{dataset}'"
    return f"step {step} of '{group}/{dataset}'"


@dataclass(frozen=True)
class InfoValue:
    """A checked info array as stored: dtype text, shape, bytes (C order) and their CRC-32."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes
    checksum: str

    @property
    def nbytes(self) -> int:
        """Bytes of the array."""
        return len(self.data)

    def array(self) -> Any:
        """The array as a new writable ``numpy.ndarray`` (dtype and byte order as stored)."""
        import numpy as np

        from ..dtypes import from_text

        return np.frombuffer(self.data, dtype=from_text(self.dtype)).reshape(self.shape).copy()


@dataclass(frozen=True)
class InfoRecord(InfoValue):
    """An info as the catalog holds it: its value, name, place and time.

    ``group`` is ``None`` for an info of the run; ``dataset`` is ``None`` for one of the
    group; ``step`` is ``None`` unless the info belongs to one step of the dataset.
    """

    run_id: int = 0
    name: str = ""
    group: str | None = None
    dataset: str | None = None
    step: int | None = None
    created_at: datetime | None = None

    @property
    def place(self) -> str:
        """Where the info is attached, in words (see :func:`place_text`)."""
        return place_text(self.group, self.dataset, self.step)


def info_value(name: str, array: Any) -> InfoValue:
    """Check an info's name and array; its stored form.

    Parameters
    ----------
    name : str
        The info's name (the rules of dataset names).
    array : array_like
        Anything :func:`numpy.asarray` makes into an array of a kind in :data:`KINDS`
        (an :class:`InfoValue` is returned as it is).

    Raises
    ------
    InvalidNameError
        A name that cannot be used.
    UnsupportedDtypeError
        The array's dtype is not bool, numeric or a fixed-width string (the message names it).
    InvalidArgumentError
        The array cannot be made, or is larger than :data:`MAX_BYTES`.
    """
    check_name(name, "info")
    if isinstance(array, InfoValue):
        return array
    import numpy as np

    from ..dtypes import check_dtype, dtype_text

    try:
        arr = np.asarray(array)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"info {name!r}: cannot make an array of {type(array).__name__} ({exc})") from None
    dt = arr.dtype
    if dt.fields is not None or dt.kind not in KINDS:
        what = "structured" if dt.fields is not None else {"O": "Python objects", "V": "raw bytes (void)", "M": "datetime64", "m": "timedelta64"}.get(
            dt.kind, f"of kind {dt.kind!r}")
        raise UnsupportedDtypeError(f"info {name!r}: dtype {dt} ({what}) cannot be an info; infos hold bool, integer, "
                                    "float, complex or fixed-width string ('S<n>', 'U<n>') arrays")
    check_dtype(dt, f"info {name!r}")  # no empty strings, no padded long double
    if arr.nbytes > MAX_BYTES:
        raise InvalidArgumentError(f"info {name!r} holds {arr.nbytes} bytes; an info holds at most {MAX_BYTES} bytes "
                                   "(16 MiB): store a larger array as a dataset")
    data = np.ascontiguousarray(arr).tobytes()
    return InfoValue(dtype_text(dt), tuple(int(n) for n in arr.shape), data, crc_text(data))
