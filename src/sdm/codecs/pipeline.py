"""Chunks to compressed bytes and back: one :class:`Pipeline` per spec, built once (:func:`pipeline_for`).

The stages follow zarr v3's arrangement (array -> bytes -> bytes):

* lossless: the chunk's elements as bytes, in the dataset's order (C or Fortran) and
  the stored byte order, untouched -> the byte shuffle (``shuffle``, zstd and lz4) ->
  the compressor (zstd, lz4, or blosc2 with its own shuffle or bitshuffle filter).
  Decoding gives back every bit: NaN payloads, ``-0.0``, big-endian values.
* lossy: the chunk's values in native byte order, in the dataset's order (a Fortran
  chunk is compressed as its transpose, whose C order is the chunk's Fortran order) ->
  ZFP or SZ3.  Decoding gives back the stored dtype (big-endian again where it was).

Every chunk of zero elements is encoded as ``b""``, and only ``b""`` decodes to one.

A lossy pipeline keeps its bound for every chunk it encodes, or raises: after
compressing, it decodes the chunk and measures the error (:func:`~sdm.codecs.bounds.check_bound`);
a chunk that broke an ``absolute`` or ``relative`` bound is compressed again with the
codec's lossless mode (ZFP reversible, SZ3 lossless), which is exact and larger.  A
chunk holding NaN or an infinity is refused with
:class:`~sdm.errors.CompressionBoundError`: neither codec bounds the error of those
(ZFP decodes them as finite numbers; SZ3 does not say what it does with them).
``rate`` and ``precision`` modes bound no error, so :meth:`Pipeline.encode` does not
measure them; :meth:`Pipeline.encode_measured` does.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal, NamedTuple, TypedDict

import numpy as np

from ..errors import CompressionBoundError, IntegrityError, InvalidArgumentError
from .bounds import measured_error
from .lossless import compressor_for, shuffle_bytes, unshuffle_bytes
from .lossy import array_codec_for
from .spec import CompressionSpec, Lossless, Lossy, format_number

__all__ = ["Order", "Encoded", "CodecInfo", "Pipeline", "LosslessPipeline", "LossyPipeline", "pipeline_for",
           "encode", "decode", "codec_info"]

Order = Literal["C", "F"]


class Encoded(NamedTuple):
    """A compressed chunk and the error its round trip measured (as :func:`~sdm.codecs.bounds.check_bound` does)."""

    data: bytes
    error: float


class CodecInfo(TypedDict):
    """What a catalog row says of a dataset's compression."""

    codec: str
    spec: str
    lossy: bool
    bound_kind: str | None
    bound: float | None


def codec_info(spec: CompressionSpec) -> CodecInfo:
    """``{"codec", "spec", "lossy", "bound_kind", "bound"}`` of *spec* (``spec`` is the canonical text)."""
    return CodecInfo(codec=spec.codec, spec=spec.text, lossy=spec.lossy, bound_kind=spec.bound_kind,
                     bound=spec.bound_value)


def _order(order: object) -> Order:
    if order == "C":
        return "C"
    if order == "F":
        return "F"
    raise InvalidArgumentError(f"order is 'C' or 'F'; got {order!r}")


def _shape(shape: object) -> tuple[int, ...]:
    if not isinstance(shape, tuple) or not all(
            isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_)) and n >= 0 for n in shape):
        raise InvalidArgumentError(f"a chunk shape is a tuple of integers >= 0; got {shape!r}")
    return tuple(int(n) for n in shape)


def _buffer(data: object) -> bytes | memoryview:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        view = memoryview(data)
        if not view.contiguous:
            raise InvalidArgumentError("compressed data is a contiguous buffer")
        return view.cast("B") if view.format != "B" or view.ndim != 1 else view
    raise InvalidArgumentError(f"compressed data is bytes, bytearray or memoryview; got {type(data).__name__}")


class Pipeline:
    """The stages of one spec; :meth:`encode` and :meth:`decode` take one chunk each.

    Built by :func:`pipeline_for` (cached per spec); stateless once built, so one pipeline
    serves every dataset of its spec.
    """

    def __init__(self, spec: CompressionSpec) -> None:
        self.spec = spec

    def encode(self, chunk: np.ndarray, order: Order = "C") -> bytes:
        """The compressed bytes of *chunk*.

        Parameters
        ----------
        chunk : numpy.ndarray
            The chunk, of the dataset's stored dtype (either byte order), any memory layout.
        order : {"C", "F"}
            The dataset's order: the elements are compressed in that order.

        Returns
        -------
        bytes
            The stream :meth:`decode` takes back (``b""`` for a chunk of zero elements).

        Raises
        ------
        CompressionSpecError
            When the chunk's dtype or number of dimensions does not suit the spec.
        CompressionBoundError
            When a lossy spec cannot keep its bound for this chunk (NaN, infinity).
        """
        return self._encode(chunk, order, measure=False).data

    def encode_measured(self, chunk: np.ndarray, order: Order = "C") -> Encoded:
        """:meth:`encode`, and the error measured on the round trip (0.0 for lossless specs, without decoding)."""
        return self._encode(chunk, order, measure=True)

    def decode(self, data: bytes | bytearray | memoryview, shape: tuple[int, ...], dtype: np.dtype | type | str,
               order: Order = "C") -> np.ndarray:
        """The chunk *data* holds.

        Parameters
        ----------
        data : bytes, bytearray or memoryview
            What :meth:`encode` gave.
        shape : tuple of int
            The chunk's shape.
        dtype : numpy dtype-like
            The dataset's stored dtype.
        order : {"C", "F"}
            The dataset's order.

        Returns
        -------
        numpy.ndarray
            A new, writable array of exactly *shape* and *dtype*, contiguous in *order*.

        Raises
        ------
        IntegrityError
            When *data* does not decode to that many elements of that dtype (damaged or
            foreign bytes).
        """
        out_order, out_shape, dt, buf = _order(order), _shape(shape), np.dtype(dtype), _buffer(data)
        if int(np.prod(out_shape, dtype=np.int64)) == 0:
            if len(buf):
                raise IntegrityError(f"compressed chunk of {len(buf)} bytes for a chunk of shape {out_shape}, which "
                                     "holds no element (SDM encodes it as no bytes)")
            return np.empty(out_shape, dt, order=out_order)
        if not len(buf):
            raise IntegrityError(f"compressed chunk is empty, the chunk of shape {out_shape} holds elements")
        return self._decode(buf, out_shape, dt, out_order)

    def _encode(self, chunk: np.ndarray, order: Order, measure: bool) -> Encoded:
        if not isinstance(chunk, np.ndarray):
            raise InvalidArgumentError(f"a chunk is a numpy.ndarray; got {type(chunk).__name__}")
        in_order = _order(order)
        self.spec.check_array(chunk.dtype, chunk.shape)
        if chunk.size == 0:
            return Encoded(b"", 0.0)
        return self._encode_values(chunk, in_order, measure)

    def _encode_values(self, chunk: np.ndarray, order: Order, measure: bool) -> Encoded:
        raise NotImplementedError

    def _decode(self, data: bytes | memoryview, shape: tuple[int, ...], dtype: np.dtype, order: Order) -> np.ndarray:
        raise NotImplementedError


class LosslessPipeline(Pipeline):
    """bytes in the dataset's order -> optional byte shuffle -> zstd, lz4 or blosc2."""

    def __init__(self, spec: Lossless) -> None:
        super().__init__(spec)
        self._compressor = compressor_for(spec)
        self._shuffle = spec.shuffle == "shuffle" and spec.name != "blosc2"  # blosc2 shuffles inside

    def _encode_values(self, chunk: np.ndarray, order: Order, measure: bool) -> Encoded:
        itemsize = chunk.dtype.itemsize
        raw = np.ascontiguousarray(chunk.reshape(-1, order=order)).view(np.uint8)
        if self._shuffle and itemsize > 1:
            raw = shuffle_bytes(raw, itemsize)
        return Encoded(self._compressor.compress(raw, itemsize), 0.0)

    def _decode(self, data: bytes | memoryview, shape: tuple[int, ...], dtype: np.dtype, order: Order) -> np.ndarray:
        out = np.empty(shape, dtype, order=order)
        target = out.reshape(-1, order=order).view(np.uint8)  # a view: *out* is contiguous in *order*
        if self._shuffle and dtype.itemsize > 1:
            shuffled = np.empty(target.size, np.uint8)
            self._compressor.decompress_into(data, shuffled)
            unshuffle_bytes(shuffled, dtype.itemsize, target)
        else:
            self._compressor.decompress_into(data, target)
        return out


class LossyPipeline(Pipeline):
    """values in native byte order and the dataset's order -> ZFP or SZ3, the bound checked on every chunk."""

    def __init__(self, spec: Lossy) -> None:
        super().__init__(spec)
        self._codec = array_codec_for(spec)
        self._bounded = spec.error_bounded

    def _encode_values(self, chunk: np.ndarray, order: Order, measure: bool) -> Encoded:
        spec = self.spec
        native = chunk.astype(chunk.dtype.newbyteorder("="), copy=False)
        values = np.ascontiguousarray(native if order == "C" else native.T)
        values = values.reshape(values.shape or (1,))
        if values.dtype.kind == "f":
            bad = int(np.count_nonzero(~np.isfinite(values)))
            if bad:
                raise CompressionBoundError(
                    f"compression {spec.text!r} cannot bound the error of NaN or infinite values, and the chunk holds "
                    f"{bad}: store this dataset with a lossless codec such as 'zstd'")
        data = self._codec.compress(values, exact=False)
        if not (measure or self._bounded):
            return Encoded(data, 0.0)
        error = measured_error(spec, values, self._codec.decompress(data, values.shape, values.dtype))
        bound = spec.bound_value
        if self._bounded and bound is not None and not error <= bound:
            data = self._codec.compress(values, exact=True)
            error = measured_error(spec, values, self._codec.decompress(data, values.shape, values.dtype))
            if not error <= bound:
                raise CompressionBoundError(f"compression {spec.text!r} broke its bound even in {spec.codec}'s "
                                            f"lossless mode: {spec.bound_kind} error {error!r} measured, at most "
                                            f"{format_number(bound)} asked")
        return Encoded(data, error)

    def _decode(self, data: bytes | memoryview, shape: tuple[int, ...], dtype: np.dtype, order: Order) -> np.ndarray:
        native = dtype.newbyteorder("=")
        stored_shape = shape if order == "C" else shape[::-1]
        values = self._codec.decompress(data, stored_shape or (1,), native).reshape(stored_shape)
        out = values if order == "C" else values.T
        return out.astype(dtype) if dtype != native else out


@lru_cache(maxsize=64)
def pipeline_for(spec: CompressionSpec) -> Pipeline:
    """The pipeline of *spec*, built on first use and kept (the codec's package imported then).

    Raises
    ------
    CompressionSpecError
        When the codec's package is not installed.
    """
    if isinstance(spec, Lossless):
        return LosslessPipeline(spec)
    if isinstance(spec, Lossy):
        return LossyPipeline(spec)
    raise InvalidArgumentError(f"a compression spec is a Lossless or Lossy spec; got {type(spec).__name__}")


def encode(spec: CompressionSpec, chunk: np.ndarray, order: Order = "C") -> bytes:
    """``pipeline_for(spec).encode(chunk, order)``: see :meth:`Pipeline.encode`."""
    return pipeline_for(spec).encode(chunk, order)


def decode(spec: CompressionSpec, data: bytes | bytearray | memoryview, shape: tuple[int, ...],
           dtype: np.dtype | type | str, order: Order = "C") -> np.ndarray:
    """``pipeline_for(spec).decode(data, shape, dtype, order)``: see :meth:`Pipeline.decode`."""
    return pipeline_for(spec).decode(data, shape, dtype, order)
