"""Compressed chunks: the spec of a dataset's compression and the pipeline that applies it.

The codec layer alone: pure functions of a chunk, no I/O, no catalog.  ``docs/compression.md``
describes the grammar, the codecs, their bounds and what each refuses.

>>> spec = parse_compression("zstd:3:shuffle")
>>> data = encode(spec, chunk, order="C")                       # doctest: +SKIP
>>> same = decode(spec, data, chunk.shape, chunk.dtype, "C")    # doctest: +SKIP

Importing this package imports numpy, never a codec's package: zfpy, pysz, blosc2 and
numcodecs are imported when a pipeline of theirs is first built
(:func:`parse_compression` imports the one it names, to refuse a missing package early).
"""

from __future__ import annotations

from .bounds import check_bound, max_abs_error, value_range
from .parse import parse_compression
from .pipeline import CodecInfo, Encoded, Order, Pipeline, codec_info, decode, encode, pipeline_for
from .spec import TEXT_MAX, BoundKind, CompressionSpec, Lossless, Lossy

__all__ = [
    "parse_compression", "CompressionSpec", "Lossless", "Lossy", "BoundKind", "TEXT_MAX",
    "Pipeline", "pipeline_for", "encode", "decode", "Encoded", "Order", "codec_info", "CodecInfo",
    "max_abs_error", "value_range", "check_bound",
]
