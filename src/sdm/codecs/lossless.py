"""Bytes to bytes: the byte shuffle and the lossless compressors (zstd, lz4 from numcodecs; blosc2).

The stages of a lossless pipeline after the chunk became bytes (the dataset's order,
the stored byte order), in the manner of zarr v3's bytes-to-bytes codecs.  Every
compressor decodes straight into the memory of the array handed back, after checking
that the stream holds exactly that many bytes: a stream that decodes to another size is
an :class:`~sdm.errors.IntegrityError`, never a silently short or padded chunk.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..errors import IntegrityError
from .libraries import load
from .spec import Lossless

__all__ = ["ByteCompressor", "compressor_for", "shuffle_bytes", "unshuffle_bytes", "zstd_content_size"]

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class ByteCompressor(Protocol):
    """What a lossless pipeline needs of a compressor."""

    def compress(self, data: np.ndarray, itemsize: int) -> bytes:
        """Compress *data* (a contiguous 1-D ``uint8`` array) whose elements are *itemsize* bytes."""
        ...

    def decompress_into(self, data: bytes | memoryview, out: np.ndarray) -> None:
        """Decompress *data* into *out* (a contiguous 1-D ``uint8`` array of exactly the decoded size)."""
        ...


def shuffle_bytes(raw: np.ndarray, itemsize: int) -> np.ndarray:
    """Byte *k* of every element, for k = 0 .. itemsize-1, one group after another (numcodecs' ``Shuffle``'s layout).

    Parameters
    ----------
    raw : numpy.ndarray
        Contiguous 1-D ``uint8``, a multiple of *itemsize* long.
    itemsize : int
        Bytes per element.
    """
    return np.ascontiguousarray(raw.reshape(-1, itemsize).T).reshape(-1)


def unshuffle_bytes(shuffled: np.ndarray, itemsize: int, out: np.ndarray) -> None:
    """Undo :func:`shuffle_bytes`: write the elements' bytes back in place into *out* (1-D ``uint8``)."""
    out.reshape(-1, itemsize)[...] = shuffled.reshape(itemsize, -1).T


def zstd_content_size(data: bytes | memoryview) -> int | None:
    """The decoded size a zstd frame's header declares (RFC 8878, 3.1.1.1), or ``None`` when it declares none.

    Raises
    ------
    IntegrityError
        When *data* does not start with a zstd frame header.
    """
    head = bytes(data[:18])
    if len(head) < 5 or head[:4] != _ZSTD_MAGIC:
        raise IntegrityError("compressed chunk is not a zstd frame (its first bytes are not zstd's magic number)")
    descriptor = head[4]
    fcs_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    start = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if width == 0:
        return None
    if len(head) < start + width:
        raise IntegrityError("compressed chunk is a truncated zstd frame header")
    size = int.from_bytes(head[start:start + width], "little")
    return size + 256 if width == 2 else size


def _expect(declared: int | None, out: np.ndarray, codec: str) -> None:
    if declared != out.size:
        raise IntegrityError(f"compressed chunk decodes to {declared} bytes with {codec}, the chunk holds {out.size}")


def _failed(codec: str, exc: Exception) -> IntegrityError:
    return IntegrityError(f"compressed chunk cannot be decoded with {codec}: {type(exc).__name__}: {exc}")


class _Zstd:
    def __init__(self, spec: Lossless) -> None:
        self._codec: Any = load("zstd", spec.package).Zstd(level=spec.level)

    def compress(self, data: np.ndarray, itemsize: int) -> bytes:
        return bytes(self._codec.encode(data))

    def decompress_into(self, data: bytes | memoryview, out: np.ndarray) -> None:
        _expect(zstd_content_size(data), out, "zstd")
        try:
            self._codec.decode(data, out=out)
        except (ValueError, RuntimeError) as exc:
            raise _failed("zstd", exc) from None


class _LZ4:
    def __init__(self, spec: Lossless) -> None:
        self._codec: Any = load("lz4", spec.package).LZ4(acceleration=spec.level)

    def compress(self, data: np.ndarray, itemsize: int) -> bytes:
        return bytes(self._codec.encode(data))

    def decompress_into(self, data: bytes | memoryview, out: np.ndarray) -> None:
        # numcodecs' LZ4 stream: the decoded size (4 bytes, little-endian), then one LZ4 block
        _expect(int.from_bytes(bytes(data[:4]), "little") if len(data) >= 4 else None, out, "lz4")
        try:
            self._codec.decode(data, out=out)
        except (ValueError, RuntimeError) as exc:
            raise _failed("lz4", exc) from None


class _Blosc2:
    def __init__(self, spec: Lossless) -> None:
        self._blosc2: Any = load("blosc2", spec.package)
        self._codec = getattr(self._blosc2.Codec, str(spec.inner).upper())
        self._filter = {"noshuffle": self._blosc2.Filter.NOFILTER, "shuffle": self._blosc2.Filter.SHUFFLE,
                        "bitshuffle": self._blosc2.Filter.BITSHUFFLE}[spec.shuffle]
        self._level = spec.level

    def compress(self, data: np.ndarray, itemsize: int) -> bytes:
        return bytes(self._blosc2.compress2(data, codec=self._codec, clevel=self._level, filters=[self._filter],
                                            filters_meta=[0], typesize=itemsize))

    def decompress_into(self, data: bytes | memoryview, out: np.ndarray) -> None:
        try:
            nbytes, cbytes, _ = self._blosc2.get_cbuffer_sizes(data)
        except (ValueError, RuntimeError) as exc:
            raise _failed("blosc2", exc) from None
        if cbytes != len(data):
            raise IntegrityError(f"compressed chunk of {len(data)} bytes holds a blosc2 frame of {cbytes}")
        _expect(nbytes, out, "blosc2")
        try:
            self._blosc2.decompress2(data, dst=out)
        except (ValueError, RuntimeError) as exc:
            raise _failed("blosc2", exc) from None


def compressor_for(spec: Lossless) -> ByteCompressor:
    """The compressor of *spec* (its package imported now).

    Raises
    ------
    CompressionSpecError
        When the package is not installed.
    """
    if spec.name == "zstd":
        return _Zstd(spec)
    return _LZ4(spec) if spec.name == "lz4" else _Blosc2(spec)
