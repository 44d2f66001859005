"""The constants of the ``mix64-v2`` checksum (:mod:`sdm.integrity` documents the algorithm), defined once
for the numpy code and the compiled loop (:mod:`sdm._mix64_kernel`)."""

from __future__ import annotations

import numpy as np

_MASK = (1 << 64) - 1
_K = 0x9E3779B97F4A7C15  # odd: the golden ratio
_SEED = 0x243F6A8885A308D3  # digits of pi
_C1 = np.uint64(0xFF51AFD7ED558CCD)  # MurmurHash3's fmix64 multipliers
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_R = np.uint64(33)
_U64 = np.uint64
