"""The pieces of ``sdm.exporting.virtual`` that need no run: chunk grids, fills, byte orders, roots, codecs."""

from __future__ import annotations

import numpy as np
import pytest

from sdm.codecs import parse_compression
from sdm.errors import InvalidArgumentError
from sdm.exporting.codecs import stored_zarr_codecs
from sdm.exporting.virtual import (Unreferenceable, _grid, _stream_chunk, _swapped_fields, bytes_codec, chunk_key,
                                   fill_value, root_of)


@pytest.mark.parametrize("stored,elements,chunk", [
    ((12, 4), 48, (12, 4)),  # one extent: the whole step
    ((12, 4), 16, (4, 4)),   # rows split evenly
    ((12, 4), 8, (2, 4)),
    ((12, 4), 6, None),      # half rows: no block of the array
    ((2, 3, 4), 4, (1, 1, 4)),
    ((2, 3, 4), 12, (1, 3, 4)),
    ((5,), 5, (5,)),
])
def test_a_run_of_the_stream_is_a_chunk_only_when_it_is_a_block(stored, elements, chunk) -> None:
    assert _stream_chunk(stored, elements) == chunk


def boxes(shape, chunk):
    """The boxes of a regular grid of *chunk* over *shape* (2-D), in some order."""
    return [((i, j), chunk) for j in range(0, shape[1], chunk[1]) for i in range(0, shape[0], chunk[0])]


def test_chunks_that_tile_the_array_are_a_grid() -> None:
    chunk, indices = _grid(boxes((12, 4), (6, 2)), (12, 4), 0)
    assert chunk == (6, 2) and sorted(indices) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert _grid([], (0, 4), 3) == ((1, 4), [])  # a step of no element has no chunk


@pytest.mark.parametrize("given,why", [
    ([((0, 0), (5, 4)), ((5, 0), (5, 4)), ((10, 0), (2, 4))],
     "the chunks of step 7 form no regular grid: Zarr's chunks are all of one shape that divides the array (12, 4), "
     "and SDM's are [(2, 4), (5, 4)] (the writers' boxes)"),
    ([((0, 0), (6, 4)), ((6, 0), (3, 4)), ((9, 0), (3, 4))],
     "the chunks of step 7 form no regular grid: Zarr's chunks are all of one shape that divides the array (12, 4), "
     "and SDM's are (6, 4) beside (3, 4) at (6, 0) (the writers' boxes)"),
    ([((0, 0), (6, 4)), ((0, 0), (6, 4))], "the chunks of step 7 do not start at the array's origin once"),
    ([((0, 0), (6, 4))], "the chunks of step 7 do not cover the array"),
    ([((6, 0), (6, 4))], "the chunks of step 7 do not start at the array's origin once"),
])
def test_chunks_that_do_not_tile_the_array_are_refused(given, why) -> None:
    with pytest.raises(Unreferenceable) as exc:
        _grid(given, (12, 4), 7)
    assert str(exc.value) == why


@pytest.mark.parametrize("dtype,attrs,fill", [
    ("<f8", {}, "nan"), ("<c8", {}, "nan"), ("<i4", {}, -2**31), ("<i8", {}, -2**63), ("<u2", {}, 2**16 - 1),
    ("|b1", {}, False), ("<M8[s]", {}, None), ("|S4", {}, None),
    ("<f4", {"_FillValue": -999}, -999.0),  # the dataset's own
    ("<i4", {"_FillValue": 0.5}, -2**31),   # not an int32: ignored
])
def test_fill_values_never_zero_unless_the_dataset_says_so(dtype, attrs, fill) -> None:
    got = fill_value(np.dtype(dtype), attrs)
    if fill == "nan":
        assert np.isnan(got)
    else:
        assert got == fill and type(got) is type(fill)


def test_byte_orders() -> None:
    assert bytes_codec(np.dtype(">f8")).endian.value == "big"
    assert bytes_codec(np.dtype("<i2")).endian.value == "little"
    assert bytes_codec(np.dtype("|S4")).endian is None and bytes_codec(np.dtype("|b1")).endian is None
    assert _swapped_fields(np.dtype([("a", "<f8"), ("b", ">i2")]))
    assert _swapped_fields(np.dtype([("a", "<f8"), ("n", [("b", ">f4")])]))
    assert not _swapped_fields(np.dtype([("a", "<f8"), ("s", "|S3"), ("b", "<i2", (2,))]))
    assert not _swapped_fields(np.dtype(">f8"))  # a plain dtype's order is the bytes codec's


def test_roots() -> None:
    assert root_of(None, "/data/sdm").url == "/data/sdm"
    mount = root_of("/mnt/x/", "/data/sdm")
    assert (mount.url, mount.uri, mount.local, mount.of("run/f.sdm")) == ("/mnt/x", "file:///mnt/x", True,
                                                                          "/mnt/x/run/f.sdm")
    web = root_of("https://host/sdm/", "/data")
    assert (web.url, web.uri, web.local) == ("https://host/sdm", "https://host/sdm", False)
    for bad in ("mnt/x", "", "http:/x"):
        with pytest.raises(InvalidArgumentError, match="root_url must be an absolute path or a URL"):
            root_of(bad, "/data")


def test_stored_codecs_as_zarr_reads_them() -> None:
    dtype, serializer, chain = stored_zarr_codecs(parse_compression("zstd:3:shuffle"), np.dtype(">f8"))
    assert dtype == np.dtype(">f8") and serializer.endian.value == "big"
    assert [c.to_dict()["name"] for c in chain] == ["numcodecs.shuffle", "zstd"]
    _, _, chain = stored_zarr_codecs(parse_compression("lz4"), np.dtype("<i1"))
    assert [c.to_dict()["name"] for c in chain] == ["numcodecs.lz4"]  # one-byte elements: no shuffle
    dtype, serializer, chain = stored_zarr_codecs(parse_compression("zfp:tolerance=0.01"), np.dtype(">f4"))
    assert dtype == np.dtype("<f4") and serializer.to_dict()["name"] == "numcodecs.zfpy" and chain is None
    assert "Blosc2 frames" in stored_zarr_codecs(parse_compression("blosc2"), np.dtype("<f8"))
    assert "SZ3 streams" in stored_zarr_codecs(parse_compression("sz3:absolute=0.1"), np.dtype("<f8"))


def test_chunk_keys() -> None:
    assert chunk_key("fields/T", (3, 0, 1), ".") == "fields/T/3.0.1"
    assert chunk_key("fields/T", (3, 0, 1), "/") == "fields/T/c/3/0/1"
