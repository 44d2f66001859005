"""An array that grows by doubling, so data of unknown size is stored in one pass."""

from __future__ import annotations

import numpy as np

__all__ = ["GrowableArray"]


class GrowableArray:
    """Rows appended in chunks; capacity doubles when full (the paper's ``realloc``).

    Parameters
    ----------
    width : int
        Columns per row.
    dtype : numpy dtype-like
    capacity : int
        Initial rows.
    """

    def __init__(self, width: int, dtype=np.int64, capacity: int = 1024) -> None:
        self._data = np.empty((max(1, capacity), width), dtype=dtype)
        self._n = 0
        self.grows = 0

    def append(self, rows: np.ndarray) -> None:
        """Append rows (shape ``(k, width)``)."""
        k = len(rows)
        if self._n + k > len(self._data):
            cap = len(self._data)
            while cap < self._n + k:
                cap *= 2
            bigger = np.empty((cap, self._data.shape[1]), dtype=self._data.dtype)
            bigger[: self._n] = self._data[: self._n]
            self._data = bigger
            self.grows += 1
        self._data[self._n : self._n + k] = rows
        self._n += k

    @property
    def array(self) -> np.ndarray:
        """The rows stored so far (a view)."""
        return self._data[: self._n]

    def __len__(self) -> int:
        return self._n
