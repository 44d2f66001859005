"""The codec each export format gets for a dataset's SDM compression (``docs/compression.md``, "Exports").

An export writes the values SDM reads (decoded), and compresses them again with the
format's codec nearest to the dataset's SDM spec (:class:`Choice`), or to the spec of
``sdm export --compression`` (:func:`resolve`):

=========================  ===============================  ===============================  ===============================
SDM spec                   HDF5 (h5py + hdf5plugin)         NetCDF-4 (netCDF4)               Zarr v3 (zarr-python)
=========================  ===============================  ===============================  ===============================
``zstd:L:S``               ``Zstd(clevel=L)`` [+ shuffle]   zstd level L, no shuffle         ``[Shuffle] ZstdCodec(L)``
``lz4:A:S``                ``LZ4()`` [+ shuffle]            zstd level 1, no shuffle         ``[Shuffle] LZ4(A)`` (numcodecs)
``blosc2:C:L:S``           ``Blosc2(C, L, S)``              zstd level L, no shuffle         ``BloscCodec(C, L, S)``
``zfp:tolerance=t``        ``Zfp(accuracy=t - m)``          zlib 4 + shuffle (lossless)      ``ZFPY`` mode 4, ``t - m``
``zfp:rate=r``             ``Zfp(rate=r)``                  zlib 4 + shuffle (lossless)      ``ZFPY`` mode 2, rate r
``zfp:precision=p``        ``Zfp(precision=p)``             zlib 4 + shuffle (lossless)      ``ZFPY`` mode 3, precision p
``sz3:absolute=t``         ``SZ3(absolute=t - m)``          zlib 4 + shuffle (lossless)      zstd 3 + shuffle (lossless)
``sz3:relative=r``         zstd 3 + shuffle (lossless)      zlib 4 + shuffle (lossless)      zstd 3 + shuffle (lossless)
=========================  ===============================  ===============================  ===============================

*m* is the largest error the dataset's steps recorded when SDM wrote them (0 for a raw
dataset): a lossy export is handed what is left of the bound, so its values stay within
*t* of the originals when the format's codec keeps its own bound; the export measures
its own error (against SDM's values) and records both. A relative bound is relative to
the value range of each chunk the compressor sees, and the export's chunks are not
SDM's, so it is exported losslessly. NetCDF gets zstd for lz4 and blosc2 too: netCDF-C's
blosc filter fails the file on a chunk it cannot shrink; netCDF4-python shuffles only
with zlib, so NetCDF's zstd is unshuffled. Without zstd support in
netCDF-C, NetCDF falls back to zlib with the level clamped to 1..9. zstd levels outside 1..22
(fast levels) are clamped to 1 for HDF5 and NetCDF, whose filters take 1..22 only;
HDF5's lz4 filter has no acceleration. A lossy codec needs a chunk of at most 4
dimensions: a larger one is exported losslessly.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..codecs import CompressionSpec, Lossless, Lossy, parse_compression
from ..errors import CompressionSpecError

__all__ = ["Choice", "Applied", "resolve", "hdf5_filter", "netcdf_filter", "zarr_codecs", "stored_zarr_codecs", "bytes_codec", "array_attrs",
           "spec_of_attrs", "spec_of_hdf5", "spec_of_netcdf", "spec_of_zarr", "FALLBACK"]

#: What a lossy dataset is exported with where the format cannot keep its bound (HDF5, Zarr).
FALLBACK = Lossless("zstd", 3, "shuffle")
_NC_LOSSLESS = "zlib level 4 + shuffle"


@dataclass(frozen=True)
class Choice:
    """What an export applies to one dataset.

    Attributes
    ----------
    spec : CompressionSpec or None
        The SDM spec the format's codec mirrors (the dataset's own, or the override); None:
        uncompressed (or the format's default codec when *default*).
    source : str or None
        The dataset's own canonical codec text (``DatasetRecord.compression``); None: raw.
    max_error : float or None
        The largest error its steps recorded at write time (a lossy dataset; else None).
    default : bool
        ``compression=True`` on a raw dataset: the format's default codec (gzip, zlib, zstd).
    """

    spec: CompressionSpec | None
    source: str | None = None
    max_error: float | None = None
    default: bool = False

    @property
    def source_spec(self) -> CompressionSpec | None:
        """The dataset's own spec (None: raw)."""
        return CompressionSpec.from_record(self.source) if self.source is not None else None

    def budget(self) -> float | None:
        """For an absolute bound: the bound left to the export's codec, ``t - m`` (None: not an absolute bound)."""
        spec = self.spec
        if not isinstance(spec, Lossy) or spec.bound_kind != "absolute":
            return None
        return spec.value - (self.max_error or 0.0)


@dataclass
class Applied:
    """What one format gives a dataset.

    Attributes
    ----------
    kwargs : dict
        The format library's arguments (h5py ``create_dataset``, netCDF4 ``createVariable``,
        zarr ``create_array``).
    text : str
        The format's codec, in words (attribute ``sdm_export_codec``).
    lossy : bool
        The format's codec may change values: the export measures its error.
    note : str or None
        Why the format's codec is not the dataset's (a lossless copy of a lossy dataset, a
        clamped level, ...).
    bound : tuple of (str, float) or None
        A lossy codec's bound as handed to the format (kind, value).
    """

    kwargs: dict[str, Any] = field(default_factory=dict)
    text: str = "none"
    lossy: bool = False
    note: str | None = None
    bound: tuple[str, float] | None = None


def resolve(value: Any) -> tuple[str, CompressionSpec | None]:
    """What ``compression=`` asks of an export.

    Parameters
    ----------
    value : None, bool, str, dict or CompressionSpec
        None: each dataset as it is stored (raw ones uncompressed); True (or ``"default"``):
        the same, raw datasets with the format's default codec; False or ``"none"``: nothing
        compressed; else a spec in SDM's grammar (:func:`sdm.codecs.parse_compression`)
        applied to every dataset.

    Returns
    -------
    tuple
        ``("follow" | "default" | "none" | "spec", spec or None)``.

    Raises
    ------
    CompressionSpecError
        A spec SDM refuses, with :func:`~sdm.codecs.parse_compression`'s message.
    """
    if value is None:
        return "follow", None
    if value is True or value == "default":
        return "default", None
    if value is False or value == "none":
        return "none", None
    if isinstance(value, (bool, int, float)):
        raise CompressionSpecError(f"compression must be None, True, False, 'none', 'default' or a spec; got {value!r}")
    spec = parse_compression(value)
    return ("spec", spec) if spec is not None else ("none", None)


def _lossy_fits(spec: Lossy, dtype: np.dtype, chunk: tuple[int, ...]) -> str | None:
    """Why a lossy codec cannot take these chunks (None: it can)."""
    if len([n for n in chunk if n != 1]) > 4 or len(chunk) > 5:
        return f"{spec.codec} takes chunks of at most 4 dimensions"
    try:
        spec.check_dtype(dtype)
    except CompressionSpecError as exc:
        return str(exc)
    return None


def _lossless_note(choice: Choice, why: str) -> str:
    return f"{choice.spec.text if choice.spec else choice.source}: {why}; the values SDM reads are stored losslessly"


def _lossy_plan(choice: Choice, dtype: np.dtype, chunk: tuple[int, ...], *, sz3: bool) -> tuple[Lossy | None, str]:
    """The lossy spec the format gets (its bound what is left of it), or None and why not."""
    spec = choice.spec
    assert isinstance(spec, Lossy)
    why = _lossy_fits(spec, dtype, chunk)
    if why is not None:
        return None, why
    if spec.codec == "sz3" and not sz3:
        return None, "the format has no SZ3 codec"
    if spec.bound_kind == "relative":
        return None, "a relative bound depends on the chunks the compressor sees, which the export's are not"
    budget = choice.budget()
    if budget is not None:
        if budget <= 0:
            return None, f"its steps already reached the bound ({choice.max_error!r} recorded)"
        return Lossy(spec.name, spec.mode, budget), ""
    return spec, ""


# ------------------------------------------------------------------ HDF5
def hdf5_filter(choice: Choice, dtype: np.dtype, chunk: tuple[int, ...]) -> Applied:
    """h5py ``create_dataset`` arguments for *choice* (hdf5plugin's filters; ``shuffle=True`` for byte shuffle)."""
    spec = choice.spec
    if spec is None:
        return Applied({"compression": "gzip"}, "gzip level 4") if choice.default else Applied()
    import hdf5plugin

    note = None
    if isinstance(spec, Lossy):
        plan, why = _lossy_plan(choice, dtype, chunk, sz3=hasattr(hdf5plugin, "SZ3"))
        if plan is not None:
            if plan.name == "sz3":
                return Applied(dict(hdf5plugin.SZ3(absolute=plan.value)), f"hdf5plugin.SZ3(absolute={plan.value!r})",
                               True, bound=("absolute", plan.value))
            key = {"tolerance": "accuracy", "rate": "rate", "precision": "precision"}[plan.mode]
            zfp = (hdf5plugin.Zfp(accuracy=plan.value) if key == "accuracy" else hdf5plugin.Zfp(rate=plan.value)
                   if key == "rate" else hdf5plugin.Zfp(precision=plan.value))
            return Applied(dict(zfp), f"hdf5plugin.Zfp({key}={plan.value!r})", True,
                           bound=(plan.bound_kind or key, plan.value))
        note, spec = _lossless_note(choice, why), FALLBACK
    assert isinstance(spec, Lossless)
    shuffle = spec.shuffle == "shuffle"
    if spec.name == "blosc2":
        flt = {"noshuffle": hdf5plugin.Blosc2.NOFILTER, "shuffle": hdf5plugin.Blosc2.SHUFFLE,
               "bitshuffle": hdf5plugin.Blosc2.BITSHUFFLE}[spec.shuffle]
        cname: Any = spec.inner or "zstd"  # one of BLOSC2_INNER, the names hdf5plugin takes
        return Applied(dict(hdf5plugin.Blosc2(cname=cname, clevel=spec.level, filters=flt)),
                       f"hdf5plugin.Blosc2(cname={spec.inner!r}, clevel={spec.level}, filters={spec.shuffle})", note=note)
    if spec.name == "lz4":
        kwargs: dict[str, Any] = dict(hdf5plugin.LZ4())
        text = "hdf5plugin.LZ4()"
        if spec.level != 1:
            note = note or f"{spec.text}: HDF5's lz4 filter has no acceleration"
    else:
        level = spec.level if 1 <= spec.level <= 22 else 1
        if level != spec.level:
            note = note or f"{spec.text}: HDF5's zstd filter takes levels 1..22; level 1"
        kwargs, text = dict(hdf5plugin.Zstd(clevel=level)), f"hdf5plugin.Zstd(clevel={level})"
    if shuffle:
        kwargs["shuffle"] = True
        text = f"shuffle + {text}"
    return Applied(kwargs, text, note=note)


# ------------------------------------------------------------------ NetCDF-4
_NC_BLOSC = {"blosclz": "blosc_lz", "lz4": "blosc_lz4", "lz4hc": "blosc_lz4hc", "zlib": "blosc_zlib",
             "zstd": "blosc_zstd"}


def netcdf_filter(choice: Choice, dtype: np.dtype) -> Applied:
    """netCDF4 ``createVariable`` arguments for *choice*: zstd where netCDF-C has it, else zlib.

    lz4 and blosc2 get zstd too (blosc2's level, lz4 level 1): netCDF-C's blosc filter makes
    the file unwritable when a chunk does not shrink. netCDF4-python applies HDF5's shuffle
    filter only with zlib, so zstd gets none.

    NetCDF-4 has no lossy codec of SDM's (``least_significant_digit`` and quantization
    are other things): a lossy dataset's values, as SDM reads them, are stored with zlib.
    """
    import netCDF4

    spec = choice.spec
    if spec is None:
        return Applied({"zlib": True, "complevel": 4}, "zlib level 4") if choice.default else Applied()
    zstd_ok = bool(getattr(netCDF4, "__has_zstandard_support__", False))
    if isinstance(spec, Lossy):
        return Applied({"compression": "zlib", "complevel": 4, "shuffle": True}, _NC_LOSSLESS,
                       note=_lossless_note(choice, "NetCDF-4 has no lossy codec of SDM's"))
    assert isinstance(spec, Lossless)
    shuffled = spec.shuffle != "noshuffle"
    unshuffled = "; without shuffle (netCDF4 shuffles with zlib only)" if shuffled else ""
    if spec.name == "zstd" and zstd_ok:
        level = spec.level if 1 <= spec.level <= 22 else 1
        why = [] if level == spec.level else ["NetCDF's zstd takes levels 1..22; level 1"]
        why += ["without shuffle (netCDF4 shuffles with zlib only)"] if shuffled else []
        return Applied({"compression": "zstd", "complevel": level}, f"zstd level {level}",
                       note=f"{spec.text}: {'; '.join(why)}" if why else None)
    if spec.name in ("lz4", "blosc2") and zstd_ok:
        # not netCDF-C's blosc filter: it fails the whole file on a chunk it cannot shrink ("Buffer is
        # uncompressible", then "NetCDF: HDF error" at close)
        level = min(max(spec.level, 1), 9) if spec.name == "blosc2" else 1
        return Applied({"compression": "zstd", "complevel": level}, f"zstd level {level}",
                       note=f"{spec.text}: NetCDF-4 gets zstd (netCDF-C's blosc filter fails on incompressible "
                            f"chunks){unshuffled}")
    level = min(max(spec.level, 1), 9) if spec.name != "lz4" else 1
    return Applied({"compression": "zlib", "complevel": level, "shuffle": shuffled},
                   f"zlib level {level}" + (" + shuffle" if shuffled else ""),
                   note=f"{spec.text}: netCDF-C has no {spec.name} here; zlib")


# ------------------------------------------------------------------ Zarr v3
def zarr_codecs(choice: Choice, dtype: np.dtype, chunk: tuple[int, ...]) -> Applied:
    """zarr ``create_array`` arguments (``serializer``, ``compressors``) for *choice*: zarr's own codecs and
    numcodecs' (``numcodecs.shuffle``, ``numcodecs.lz4``, ``numcodecs.zfpy``), all read by plain ``zarr.open``."""
    from zarr.codecs import BloscCodec, ZstdCodec

    spec = choice.spec
    if spec is None:
        return Applied({"compressors": "auto"}, "zstd (zarr's default)") if choice.default else \
            Applied({"compressors": None})
    note = None
    if isinstance(spec, Lossy):
        plan, why = _lossy_plan(choice, dtype, chunk, sz3=False)
        if plan is not None:
            from zarr.codecs import ZFPY

            mode = {"tolerance": 4, "rate": 2, "precision": 3}[plan.mode]
            value: float = int(plan.value) if plan.mode == "precision" else plan.value
            return Applied({"serializer": ZFPY(mode=mode, **{plan.mode: value}), "compressors": None},
                           f"numcodecs.zfpy(mode={mode}, {plan.mode}={value!r})", True,
                           bound=(plan.bound_kind or plan.mode, plan.value))
        note, spec = _lossless_note(choice, why), FALLBACK
    assert isinstance(spec, Lossless)
    size = max(dtype.itemsize, 1)
    if spec.name == "blosc2":
        cname: Any = spec.inner or "zstd"  # BLOSC2_INNER and SHUFFLES are zarr's names too
        shuf: Any = spec.shuffle
        return Applied({"compressors": [BloscCodec(cname=cname, clevel=spec.level, shuffle=shuf, typesize=size)]},
                       f"blosc(cname={spec.inner}, clevel={spec.level}, shuffle={spec.shuffle})", note=note)
    chain: list[Any] = []
    words = []
    if spec.shuffle == "shuffle":
        from zarr.codecs import Shuffle

        chain.append(Shuffle(elementsize=size))
        words.append("numcodecs.shuffle")
    if spec.name == "lz4":
        from zarr.codecs import LZ4

        chain.append(LZ4(acceleration=spec.level))
        words.append(f"numcodecs.lz4(acceleration={spec.level})")
    else:
        chain.append(ZstdCodec(level=spec.level))
        words.append(f"zstd(level={spec.level})")
    return Applied({"compressors": chain}, " + ".join(words), note=note)


# ------------------------------------------------------------------ references: SDM's stored chunks as Zarr reads them
def bytes_codec(dtype: np.dtype) -> Any:
    """Zarr's ``bytes`` codec for the stored byte order of *dtype* (none for one-byte and structured types)."""
    from zarr.codecs import BytesCodec

    order = dtype.byteorder
    if dtype.fields is not None or order == "|" or dtype.kind in "bS" or dtype.itemsize == 1:
        return BytesCodec(endian=None)
    big = order == ">" or (order == "=" and sys.byteorder == "big")
    return BytesCodec(endian="big" if big else "little")


def stored_zarr_codecs(spec: CompressionSpec, dtype: np.dtype) -> tuple[np.dtype, Any, list[Any] | None] | str:
    """The Zarr v3 codecs that decode the chunks SDM stored with *spec* as they are (the references of
    :mod:`sdm.exporting.virtual`, which copy nothing): ``(the array's dtype, serializer, compressors)``, or why
    no Zarr reader can.

    SDM's lossless chunks are the elements' bytes in the dataset's (and the byte) order,
    byte-shuffled as numcodecs' ``Shuffle`` does, then compressed by numcodecs' zstd or lz4:
    ``bytes`` -> ``numcodecs.shuffle`` -> ``zstd`` or ``numcodecs.lz4``. Its ZFP chunks are
    zfpy streams with their header, of the values in native byte order: ``numcodecs.zfpy``
    (the array's dtype is then native). Blosc2 frames (zarr's ``blosc`` codec reads Blosc 1)
    and SZ3 streams have no Zarr codec.
    """
    from zarr.codecs import ZstdCodec


    if isinstance(spec, Lossy):
        if spec.name != "zfp":
            return f"its chunks are {spec.name.upper()} streams, which no Zarr codec decodes"
        from zarr.codecs.numcodecs import ZFPY

        mode = {"tolerance": 4, "rate": 2, "precision": 3}[spec.mode]
        value: float = int(spec.value) if spec.mode == "precision" else spec.value
        return dtype.newbyteorder("="), ZFPY(mode=mode, **{spec.mode: value}), None
    assert isinstance(spec, Lossless)
    if spec.name == "blosc2":
        return ("its chunks are Blosc2 frames, which Zarr's blosc codec (Blosc 1, numcodecs) does not decode")
    chain: list[Any] = []
    if spec.shuffle == "shuffle" and dtype.itemsize > 1:
        from zarr.codecs.numcodecs import Shuffle

        chain.append(Shuffle(elementsize=dtype.itemsize))
    if spec.name == "lz4":
        from zarr.codecs.numcodecs import LZ4

        chain.append(LZ4(acceleration=spec.level))
    else:
        chain.append(ZstdCodec(level=spec.level))
    return dtype, bytes_codec(dtype), chain


# ------------------------------------------------------------------ attributes
def array_attrs(choice: Choice, applied: Applied, export_error: float | None) -> dict[str, Any]:
    """The attributes an exported array carries about its compression (none for a raw dataset exported raw).

    ``sdm_compression`` (the dataset's SDM codec), ``sdm_export_compression`` (the SDM spec
    the export mirrored, when not the dataset's), ``sdm_export_codec`` (the format's codec
    in words), ``sdm_export_note``; a lossy dataset's ``sdm_bound_kind``, ``sdm_bound`` and
    ``sdm_max_error`` (recorded at write time, against the originals); a lossy export's
    ``sdm_export_bound_kind``, ``sdm_export_bound`` and ``sdm_export_max_error`` (measured,
    against SDM's values).
    """
    out: dict[str, Any] = {}
    source = choice.source_spec
    if source is not None:
        out["sdm_compression"] = source.text
        if source.lossy:
            out["sdm_bound_kind"] = source.bound_kind
            out["sdm_bound"] = float(source.bound_value or 0.0)
            if choice.max_error is not None:
                out["sdm_max_error"] = float(choice.max_error)
    if choice.spec is not None and (source is None or choice.spec != source):
        out["sdm_export_compression"] = choice.spec.text
    elif choice.spec is None and source is not None:
        out["sdm_export_compression"] = "none"  # exported uncompressed (an import keeps it so)
    if applied.text != "none":
        out["sdm_export_codec"] = applied.text
    if applied.note:
        out["sdm_export_note"] = applied.note
    if applied.bound is not None:
        out["sdm_export_bound_kind"], out["sdm_export_bound"] = applied.bound[0], float(applied.bound[1])
        if export_error is not None:
            out["sdm_export_max_error"] = float(export_error)
    return out


def spec_of_attrs(attrs: dict[str, Any]) -> CompressionSpec | None:
    """The SDM spec an exported array names (``sdm_export_compression``, else ``sdm_compression``), or None
    (``"none"``: exported uncompressed)."""
    for key in ("sdm_export_compression", "sdm_compression"):
        value = attrs.get(key)
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.reshape(()).item()
        if value == "none":
            return None
        if isinstance(value, str):
            try:
                return CompressionSpec.from_record(value)
            except CompressionSpecError:
                return None
    return None


# ------------------------------------------------------------------ imports: a file's codec as an SDM spec
_BLOSC_CODES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 4: "zlib", 5: "zstd"}  # blosc's and blosc2's compcode
_BLOSC_SHUFFLES = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def _lossless(name: str, level: int, shuffle: str, inner: str | None = None) -> CompressionSpec | None:
    try:
        return Lossless(name, level, shuffle, inner)
    except CompressionSpecError:
        return None


def spec_of_hdf5(filters: dict[str, Any]) -> CompressionSpec | None:
    """The SDM spec nearest to an HDF5 dataset's filter pipeline (h5py ``Dataset._filters``): zstd (32015),
    lz4 (32004), blosc2 (32026) and blosc (32001) as ``blosc2``, with HDF5's shuffle; None for any other."""
    shuffle = "shuffle" if "shuffle" in filters else "noshuffle"
    if "32015" in filters:
        opts = tuple(filters["32015"]) or (3,)
        return _lossless("zstd", _signed(int(opts[0])), shuffle)
    if "32004" in filters:
        return _lossless("lz4", 1, shuffle)
    for fid in ("32026", "32001"):
        opts = tuple(int(v) for v in filters.get(fid, ()))
        if len(opts) >= 7 and opts[6] in _BLOSC_CODES and opts[5] in _BLOSC_SHUFFLES:
            return _lossless("blosc2", min(opts[4], 9), _BLOSC_SHUFFLES[opts[5]], _BLOSC_CODES[opts[6]])
    return None


def spec_of_netcdf(filters: dict[str, Any]) -> CompressionSpec | None:
    """The SDM spec nearest to a NetCDF-4 variable's ``filters()``: zstd, and blosc as ``blosc2``; None for zlib
    (SDM has no deflate) and the others."""
    level = int(filters.get("complevel") or 0)
    shuffle = "shuffle" if filters.get("shuffle") else "noshuffle"
    if filters.get("zstd"):
        return _lossless("zstd", level or 3, shuffle)
    blosc = filters.get("blosc")
    if isinstance(blosc, dict):
        inner = {v: k for k, v in _NC_BLOSC.items()}.get(str(blosc.get("compressor")))
        if inner is not None:
            return _lossless("blosc2", min(level, 9), _BLOSC_SHUFFLES.get(int(blosc.get("shuffle", 1)), "shuffle"),
                             inner)
    return None


def spec_of_zarr(codecs: Any) -> CompressionSpec | None:
    """The SDM spec nearest to a Zarr v3 array's codecs (``arr.metadata.codecs``, a shard's inner codecs
    seen through): zstd, blosc, numcodecs' lz4 and zfpy, with numcodecs' shuffle; None for any other."""
    from zarr.codecs import BloscCodec, ShardingCodec, ZstdCodec

    chain = list(codecs)
    if len(chain) == 1 and isinstance(chain[0], ShardingCodec):
        chain = list(chain[0].codecs)
    shuffle = "noshuffle"
    for codec in chain:
        name = str(getattr(codec, "codec_name", ""))
        config = dict(getattr(codec, "codec_config", {}) or {})
        if name == "numcodecs.shuffle":
            shuffle = "shuffle"
        elif isinstance(codec, ZstdCodec):
            return _lossless("zstd", int(codec.level), shuffle)
        elif isinstance(codec, BloscCodec):
            cname = getattr(codec.cname, "value", codec.cname)
            shuf = str(getattr(codec.shuffle, "value", codec.shuffle))
            return _lossless("blosc2", int(codec.clevel), shuf, str(cname))
        elif name == "numcodecs.lz4":
            return _lossless("lz4", int(config.get("acceleration", 1)), shuffle)
        elif name == "numcodecs.zfpy":
            mode = {4: "tolerance", 2: "rate", 3: "precision"}.get(int(config.get("mode", 0)))
            if mode is None or mode not in config:
                return None
            try:
                return Lossy("zfp", mode, int(config[mode]) if mode == "precision" else float(config[mode]))
            except CompressionSpecError:
                return None
    return None
