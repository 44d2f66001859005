"""The remote (archive tier) cost model, predictor and MDMS choice of SRB-OL.

Shen, Liao and Choudhary model one remote read call (their equation 2) as

``T = T_conn + T_pureopen + T_stage + T_seek + T_read(s) + T_fileclose + T_connclose``

where ``T_read(s)`` depends on the bytes ``s`` read: almost constant below 8 KB, linear
in ``s`` above 16 MB (``2.51 s/MB`` on their WAN link to HPSS), read from their Figure 5
in between.  Here ``T_read`` is a list of ``[bytes, seconds]`` points, linear between
points, the first point's value below it and the last segment's slope beyond it.  The
other constants are seconds; ``T_comm`` is the redistribution of remote collective I/O
(their ``T_commcost``), ``T_db`` the catalog look-up of a superfile's index and
``T_memcopy`` a copy out of a fetched object in memory.

One connection (``T_conn`` ... ``T_connclose``) serves all the requests a rank makes;
each object (file) read costs ``T_pureopen + T_stage`` to open and ``T_fileclose`` to
close, each request ``T_seek + T_read(bytes)``.  Ranks work in parallel, so a method
costs what its slowest rank costs.  For ``datasets`` equally shaped datasets, each its
own object, read ``reads`` times (the ``frequency`` hint), the methods cost:

==========  ==========================================================================
naive       every rank: one request per contiguous file region of its piece
            (equation 5; equation 9 for many small files on one rank)
sieving     every rank: one request over the span of its regions, the rest discarded
collective  the ranks as aggregators: one request each over an even, contiguous share
            of the span all ranks need, then one ``T_comm`` per dataset (equation 7)
subfile     one client stages the byte ranges all ranks need (merged, one request per
            range) into the fast tier once; every read then copies from there
            (``T_memcopy`` per dataset and read)
superfile   all datasets packed into one object: one request for all of them, plus
            ``T_db`` and ``T_memcopy`` (equation 10)
==========  ==========================================================================

Pieces, regions and spans come from :mod:`sdm.layout` (``Distribution.piece`` and
:mod:`sdm.layout.regions`), exactly as the local tier's planner counts them.

The MDMS choice (:func:`choose_remote`) follows the paper's section 6: the application's
hints (access pattern, data sizes, frequency of use, datasets used together) decide
which optimizations are worth offering, and the model decides among them -- see
:func:`choose_remote` for the rules.
"""

from __future__ import annotations

import json
import math
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

import numpy as np

from ..errors import HintError, InvalidArgumentError
from ..layout.distribution import Block, Cyclic, Distribution, Piece

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = [
    "SCALAR_KEYS",
    "KEYS",
    "REMOTE_METHODS",
    "SUPERFILE_THRESHOLD",
    "RemoteConstants",
    "SRB_HPSS_2003",
    "RemoteWorkload",
    "MethodCost",
    "RemotePrediction",
    "RemoteChoice",
    "archive_target",
    "parse_view",
    "predict_remote",
    "choose_remote",
    "read_method",
]

MB = 1 << 20

#: The scalar constants of the model, in seconds.
SCALAR_KEYS = ("T_conn", "T_pureopen", "T_stage", "T_seek", "T_fileclose", "T_connclose", "T_comm", "T_db",
               "T_memcopy")
#: Every key of a constants JSON object.
KEYS = (*SCALAR_KEYS, "T_read")
#: The remote methods, simplest first (the order that breaks ties).
REMOTE_METHODS = ("naive", "sieving", "collective", "subfile", "superfile")
#: Datasets up to this size may be packed into a superfile (the paper's Figure 8 still finds the
#: superfile better at 10 files of 4 MB); the ``superfile_threshold`` hint changes it.
SUPERFILE_THRESHOLD = 4 * MB
#: Above this many file regions in all (per dataset), request sizes are taken as each rank's mean.
EXACT_REGIONS = 1 << 20


def archive_target(endpoint: str) -> str:
    """The catalog's calibration target of an archive *endpoint* (e.g. ``s3://bucket/prefix``)."""
    return f"archive:{endpoint.rstrip('/')}"


def _number(value: Any) -> bool:
    """Whether *value* is a finite real number >= 0 (booleans are not numbers here)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value >= 0)


@dataclass(frozen=True)
class RemoteConstants:
    """The constants of the remote cost model (seconds; ``T_read`` as ``(bytes, seconds)`` points)."""

    T_conn: float
    T_pureopen: float
    T_stage: float
    T_seek: float
    T_fileclose: float
    T_connclose: float
    T_comm: float
    T_db: float
    T_memcopy: float
    T_read: tuple[tuple[float, float], ...]

    @classmethod
    def from_json(cls, data: Any) -> "RemoteConstants":
        """Constants from a JSON object with exactly the keys of :data:`KEYS`.

        Raises
        ------
        InvalidArgumentError
            Not an object; missing or unknown keys (all named); a scalar that is not a
            number of seconds >= 0; ``T_read`` not a non-empty list of ``[bytes, seconds]``
            points with bytes increasing.
        """
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(
                f"archive constants must be a JSON object with the keys {', '.join(KEYS)}; got {type(data).__name__}")
        missing = [k for k in KEYS if k not in data]
        unknown = sorted(str(k) for k in data if k not in KEYS)
        if missing or unknown:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
                [f"unknown {', '.join(unknown)}"] if unknown else [])
            raise InvalidArgumentError(
                f"archive constants: {'; '.join(parts)}; the keys are exactly {', '.join(KEYS)}")
        bad = [f"{k}={data[k]!r}" for k in SCALAR_KEYS if not _number(data[k])]
        if bad:
            raise InvalidArgumentError(
                f"archive constants {', '.join(bad)}: each must be a number of seconds >= 0")
        return cls(**{k: float(data[k]) for k in SCALAR_KEYS}, T_read=_read_points(data["T_read"]))

    @classmethod
    def load(cls, path: str | Path) -> "RemoteConstants":
        """Constants from a JSON file (see :meth:`from_json`).

        Raises
        ------
        InvalidArgumentError
            The file cannot be read, is not JSON, or holds bad constants.
        """
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read archive constants from {path}: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(f"archive constants file {path} is not JSON: {exc}") from None
        return cls.from_json(data)

    def to_json(self) -> dict[str, Any]:
        """The JSON object :meth:`from_json` reads (what a calibration stores)."""
        out: dict[str, Any] = {k: getattr(self, k) for k in SCALAR_KEYS}
        out["T_read"] = [[int(b) if b.is_integer() else b, s] for b, s in self.T_read]
        return out

    def read(self, nbytes: Any) -> Any:
        """``T_read`` of *nbytes* (a number or an array of them): linear between the points,
        the first point's value below the first, the last segment's slope beyond the last."""
        xs = np.array([p[0] for p in self.T_read], dtype=np.float64)
        ys = np.array([p[1] for p in self.T_read], dtype=np.float64)
        x = np.asarray(nbytes, dtype=np.float64)
        y = np.interp(x, xs, ys)
        if xs.size > 1:
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            y = np.where(x > xs[-1], ys[-1] + slope * (x - xs[-1]), y)
        return float(y) if np.ndim(y) == 0 else y

    def call(self, nbytes: float) -> float:
        """One whole remote read call of *nbytes* (equation 2)."""
        return (self.T_conn + self.T_pureopen + self.T_stage + self.T_seek + self.read(nbytes) + self.T_fileclose
                + self.T_connclose)


def _read_points(value: Any) -> tuple[tuple[float, float], ...]:
    """``T_read``'s points, checked (see :meth:`RemoteConstants.from_json`)."""
    what = "T_read must be a non-empty list of [bytes, seconds] points with bytes increasing"
    if not isinstance(value, list) or not value:
        raise InvalidArgumentError(f"archive constants: {what}; got {value!r}")
    points: list[tuple[float, float]] = []
    for i, p in enumerate(value):
        if not (isinstance(p, list) and len(p) == 2 and _number(p[0]) and _number(p[1])):
            raise InvalidArgumentError(
                f"archive constants: T_read[{i}]={p!r} must be a pair [bytes, seconds] of numbers >= 0")
        if points and p[0] <= points[-1][0]:
            raise InvalidArgumentError(f"archive constants: T_read[{i}]={p!r}: {what}")
        points.append((float(p[0]), float(p[1])))
    return tuple(points)


# The paper's measurements (CPDC at Northwestern reading HPSS at SDSC through SRB, 2003):
# Table 2 for the fixed costs, T_comm = 0.15 and T_read(256 KB) = 4.5 from equation 7,
# T_read(10 KB) = 0.63 from equation 10, T_db = 0.5 from section 4.5, T_read = 0.56 below
# 8 KB and 2.51 s/MB above 16 MB from section 3 (Table 3's K).  T_stage = 0: the paper's
# figures assume a disk copy; T_memcopy = 0: "a small overhead" it does not quantify.
# Between 256 KB and 16 MB the paper refers to its Figure 5; the points interpolate linearly.
SRB_HPSS_2003 = RemoteConstants(
    T_conn=0.71, T_pureopen=5.36, T_stage=0.0, T_seek=0.42, T_fileclose=0.52,
    T_connclose=0.00004,  # Table 2; the paper's equations 6, 7, 9 and 10 write 0.0003 (same figures to 0.01 s)
    T_comm=0.15, T_db=0.5, T_memcopy=0.0,
    T_read=((8192.0, 0.56), (10240.0, 0.63), (262144.0, 4.5), (16.0 * MB, 2.51 * 16), (32.0 * MB, 2.51 * 32)),
)


# ------------------------------------------------------------------------ workload
def parse_view(text: str, shape: Sequence[int], ranks: int) -> list[Distribution]:
    """The distribution of each rank for a view written ``block``, ``block:2x2``,
    ``cyclic[:GRID]``, ``(Block, *)`` (any access pattern) or ``map[:R]``.

    ``map:R`` is a map array whose ranks own runs of ``R`` consecutive rows dealt round
    robin (``R = 1``, the default: every row its own region, an unstructured mesh's
    worst case).  Grid views give the same distribution to every rank.

    Raises
    ------
    InvalidArgumentError
        A view none of these forms describes.
    """
    from ..layout.maparray import MapArray
    from ..layout.patterns import distribution_of

    kind, _, arg = text.strip().partition(":")
    kind = kind.strip().lower()
    try:
        if kind == "map":
            run = int(arg) if arg else 1
            if run < 1:
                raise ValueError("map:R needs R >= 1")
            rows = np.arange(int(shape[0]), dtype=np.int64)
            return [MapArray(rows[(rows // run) % ranks == r]) for r in range(ranks)]
        if kind in ("block", "cyclic") and arg:
            grid = [int(g) for g in arg.lower().split("x")]
            dist: Distribution = Block(grid=grid) if kind == "block" else Cyclic(grid=grid)
        else:
            dist = distribution_of(text, tuple(shape), ranks)
    except (ValueError, HintError) as exc:
        raise InvalidArgumentError(
            f"view {text!r}: {exc}; write block, block:2x2, cyclic, cyclic:4x1, '(Block, *)' or map:R") from None
    return [dist] * ranks


@dataclass(frozen=True)
class RemoteWorkload:
    """A read from the archive tier as the predictor sees it.

    ``datasets`` equally shaped datasets (each its own object unless packed in a
    superfile) of ``shape`` and ``dtype``, read by ``ranks`` ranks with ``view``
    (see :func:`parse_view`), stored in ``order``.  The number of reads is the
    ``frequency`` hint.
    """

    shape: tuple[int, ...]
    dtype: str = "S1"
    ranks: int = 1
    view: str = "block"
    datasets: int = 1
    order: str = "C"

    def __post_init__(self) -> None:
        if not self.shape or any(int(n) < 1 for n in self.shape):
            raise InvalidArgumentError(f"shape {self.shape}: sizes must be positive")
        if self.ranks < 1:
            raise InvalidArgumentError(f"ranks must be at least 1, got {self.ranks}")
        if self.datasets < 1:
            raise InvalidArgumentError(f"datasets must be at least 1, got {self.datasets}")
        if self.order not in ("C", "F"):
            raise InvalidArgumentError(f"order must be 'C' or 'F', got {self.order!r}")
        try:
            np.dtype(self.dtype)
        except TypeError:
            raise InvalidArgumentError(f"dtype {self.dtype!r} is not a numpy dtype") from None

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return int(np.dtype(self.dtype).itemsize)

    @property
    def nbytes(self) -> int:
        """Bytes of one dataset."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.itemsize


@dataclass(frozen=True)
class _Rank:
    """One rank's part of one dataset: bytes, file regions, span and the request cost of its regions."""

    nbytes: int
    regions: int
    lo: int
    hi: int
    region_reads: float  # sum of T_read over its regions
    runs: tuple[np.ndarray, np.ndarray] | None  # (offsets, lengths) when listed


def _ranks(w: RemoteWorkload, c: RemoteConstants) -> list[_Rank]:
    """Every rank's part of one dataset (pieces and regions from :mod:`sdm.layout`)."""
    from ..layout.regions import file_runs, rank_stats

    dists = parse_view(w.view, w.shape, w.ranks)
    pieces: list[Piece] = []
    try:
        for r, d in enumerate(dists):
            pieces.append(d.piece(w.shape, w.ranks, r))
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"view {w.view!r} on {w.ranks} ranks of shape {w.shape}: {exc}") from None
    stats = [rank_stats(p, w.order, w.itemsize) for p in pieces]
    exact = sum(s.regions for s in stats) <= EXACT_REGIONS
    out = []
    for p, s in zip(pieces, stats):
        if s.nbytes == 0:
            out.append(_Rank(0, 0, 0, 0, 0.0, None))
        elif exact:
            runs = file_runs(p, w.order, w.itemsize)
            out.append(_Rank(s.nbytes, s.regions, s.lo, s.hi, float(np.sum(c.read(runs.length))),
                             (runs.file, runs.length)))
        else:  # too many regions to list: each the rank's mean size
            out.append(_Rank(s.nbytes, s.regions, s.lo, s.hi, s.regions * c.read(s.nbytes / s.regions), None))
    return out


def _part(stats: Sequence[int], c: RemoteConstants) -> _Rank:
    """One rank's part from its layout statistics ``(bytes, regions, segments, lo, hi, ...)``."""
    nbytes, regions, lo, hi = int(stats[0]), int(stats[1]), int(stats[3]), int(stats[4])
    if nbytes == 0 or regions == 0:
        return _Rank(0, 0, 0, 0, 0.0, None)
    return _Rank(nbytes, regions, lo, hi, regions * c.read(nbytes / regions), None)


def _needed(ranks: list[_Rank]) -> np.ndarray:
    """Lengths of the merged byte ranges all ranks need (the whole span when regions were not listed)."""
    busy = [r for r in ranks if r.nbytes]
    if not busy:
        return np.zeros(0, dtype=np.int64)
    if any(r.runs is None for r in busy):
        return np.array([max(r.hi for r in busy) - min(r.lo for r in busy)], dtype=np.int64)
    offsets = np.concatenate([r.runs[0] for r in busy if r.runs is not None])
    lengths = np.concatenate([r.runs[1] for r in busy if r.runs is not None])
    order = np.argsort(offsets, kind="stable")
    lo, hi = offsets[order], offsets[order] + lengths[order]
    reach = np.maximum.accumulate(hi)
    starts = np.flatnonzero(np.concatenate(([True], lo[1:] > reach[:-1])))
    ends = np.append(starts[1:], lo.size) - 1
    return reach[ends] - lo[starts]


# ---------------------------------------------------------------------- prediction
@dataclass(frozen=True)
class MethodCost:
    """The predicted time of one remote method for the whole workload.

    ``seconds`` for all reads; ``requests`` remote requests and ``fetched`` bytes
    fetched by the slowest rank (or the stager) per dataset and read; ``eligible``
    whether the MDMS may choose it, ``why`` when not.
    """

    method: str
    seconds: float
    requests: int
    fetched: int
    eligible: bool = True
    why: str = ""


@dataclass(frozen=True)
class RemotePrediction:
    """Every remote method's predicted time for a workload under given constants."""

    workload: RemoteWorkload
    reads: float
    costs: dict[str, MethodCost] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict: the workload (with its bytes), reads and per method costs."""
        return {"workload": {**asdict(self.workload), "dataset_bytes": self.workload.nbytes}, "reads": self.reads,
                "methods": {m: {k: v for k, v in asdict(cost).items() if k != "method"}
                            for m, cost in self.costs.items()}}


@dataclass(frozen=True)
class RemoteChoice:
    """The MDMS's choice: the method, its predicted seconds, why, and every prediction."""

    method: str
    seconds: float
    reason: str
    prediction: RemotePrediction

    def to_json(self) -> dict[str, Any]:
        """The prediction's JSON with a ``choice`` entry."""
        return {**self.prediction.to_json(),
                "choice": {"method": self.method, "seconds": self.seconds, "reason": self.reason}}


def _session(c: RemoteConstants, datasets: int, per_dataset: float) -> float:
    """One connection that opens, reads (*per_dataset* seconds of requests) and closes *datasets* objects."""
    return c.T_conn + datasets * (c.T_pureopen + c.T_stage + per_dataset + c.T_fileclose) + c.T_connclose


def _shares(total: int, parts: int) -> list[int]:
    """*total* bytes split into *parts* contiguous shares as a Block distribution splits them."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _reads(hints: Mapping[str, Any] | None) -> float:
    from .hints import Hints

    return Hints.parse(hints).frequency


def predict_remote(w: RemoteWorkload, c: RemoteConstants, hints: Mapping[str, Any] | None = None,
                   ) -> RemotePrediction:
    """Predicted seconds of every remote method for *w* under constants *c*.

    The ``frequency`` hint is the number of reads of the data (default 1); every method
    but the subfile pays each read in full.  Methods are all predicted, eligible or not
    (see :func:`choose_remote`).

    Raises
    ------
    InvalidArgumentError
        A view that does not fit the shape or the ranks; a bad hint.
    """
    return _predict(w, c, _reads(hints), _ranks(w, c))


def _predict(w: RemoteWorkload, c: RemoteConstants, reads: float, ranks: list[_Rank]) -> RemotePrediction:
    """:func:`predict_remote` for the ranks' parts *ranks* of one dataset."""
    busy = [r for r in ranks if r.nbytes]
    n = w.datasets
    costs: dict[str, MethodCost] = {}
    if not busy:  # nothing to read
        return RemotePrediction(w, reads, {m: MethodCost(m, 0.0, 0, 0) for m in REMOTE_METHODS})

    # naive: one request per region (eq. 5); the slowest rank
    slow = max(busy, key=lambda r: _session(c, n, r.regions * c.T_seek + r.region_reads))
    costs["naive"] = MethodCost("naive", reads * _session(c, n, slow.regions * c.T_seek + slow.region_reads),
                                slow.regions, slow.nbytes)
    # sieving: one request over the span per rank
    wide = max(busy, key=lambda r: r.hi - r.lo)
    costs["sieving"] = MethodCost("sieving", reads * _session(c, n, c.T_seek + c.read(wide.hi - wide.lo)), 1,
                                  wide.hi - wide.lo)
    # collective: aggregators (all ranks) read even shares of the span, then redistribute (eq. 7)
    lo, hi = min(r.lo for r in busy), max(r.hi for r in busy)
    share = max(_shares(hi - lo, w.ranks))
    costs["collective"] = MethodCost("collective", reads * (_session(c, n, c.T_seek + c.read(share)) + n * c.T_comm),
                                     1, share)
    # subfile: the needed ranges staged once, then local copies at every read
    needed = _needed(ranks)
    stage = _session(c, n, needed.size * c.T_seek + float(np.sum(c.read(needed))))
    costs["subfile"] = MethodCost("subfile", stage + reads * n * c.T_memcopy, int(needed.size), int(needed.sum()))
    # superfile: one object for all datasets (eq. 10)
    whole = n * w.nbytes
    costs["superfile"] = MethodCost("superfile", reads * (c.call(whole) + c.T_db + c.T_memcopy), 1, whole)
    return RemotePrediction(w, reads, costs)


def choose_remote(w: RemoteWorkload, c: RemoteConstants, hints: Mapping[str, Any] | None = None, *,
                  parts: Sequence[Sequence[int]] | None = None) -> RemoteChoice:
    """The MDMS choice of a remote method for *w*: the eligible method predicted fastest.

    *parts*, when given, are every rank's ``(bytes, regions, segments, lo, hi, ...)`` of
    a real read (:meth:`sdm.layout.views.ResolvedView.stats`) and replace the pieces of
    ``w.view`` (each region then costs the rank's mean region size).

    The rules (the paper's section 6: hints on partitioning, sizes, frequency of use
    and datasets used together select the optimizations worth trying):

    1. ``methods`` hint (comma-separated remote methods): only those are eligible; one
       name forces that method.
    2. The access pattern against the stored layout: when every rank's piece is one
       contiguous region (the pattern conforms to the layout, e.g. ``(Block, *)``),
       sieving and collective I/O have nothing to gain and are not offered; otherwise
       (e.g. ``(Block, Block)`` on a ``(Block, *)`` layout) they are -- the paper's
       MDMS "would suggest a collective I/O".  Collective I/O needs two ranks or more.
    3. Superfiles hold small datasets used together: offered when ``datasets > 1``,
       each dataset is at most ``superfile_threshold`` bytes (hint; default
       :data:`SUPERFILE_THRESHOLD`), unless the ``associated`` hint is false.
    4. ``frequency`` (reads of the data, default 1): the subfile's stage is paid once,
       every other method pays every read.
    5. The smallest predicted time wins; ties go to the simplest method (the order of
       :data:`REMOTE_METHODS`).

    Raises
    ------
    HintError
        A ``methods`` hint naming an unknown method, or leaving no eligible method; a
        bad ``superfile_threshold`` or ``associated`` hint.
    """
    h = dict(hints or {})
    ranks = _ranks(w, c) if parts is None else [_part(p, c) for p in parts]
    pred = _predict(w, c, _reads(h), ranks)
    why: dict[str, str] = {}
    if all(r.regions <= 1 for r in ranks):
        why["sieving"] = why["collective"] = "each rank's piece is one contiguous region (conforming pattern)"
    elif w.ranks < 2:
        why["collective"] = "one rank: nothing to redistribute"
    threshold = _threshold(h.get("superfile_threshold", SUPERFILE_THRESHOLD))
    associated = _flag(h.get("associated", True), "associated")
    if w.datasets < 2:
        why["superfile"] = "one dataset: nothing to pack"
    elif w.nbytes > threshold:
        why["superfile"] = f"datasets of {w.nbytes} B exceed the superfile threshold {threshold} B"
    elif not associated:
        why["superfile"] = "the datasets are not read together (associated=false)"
    wanted = _methods(h.get("methods"))
    forced = wanted is not None and len(wanted) == 1
    if wanted is not None:
        for m in REMOTE_METHODS:
            if m not in wanted:
                why[m] = "not in the methods hint"
            elif forced:
                why.pop(m, None)
    costs = {m: MethodCost(**{**asdict(cost), "eligible": m not in why, "why": why.get(m, "")})
             for m, cost in pred.costs.items()}
    pred = RemotePrediction(pred.workload, pred.reads, costs)
    eligible = [m for m in REMOTE_METHODS if costs[m].eligible]
    if not eligible:
        raise HintError(f"planner hint methods={h.get('methods')!r} leaves no remote method for this read: "
                        + "; ".join(f"{m}: {why[m]}" for m in REMOTE_METHODS))
    best = min(eligible, key=lambda m: (costs[m].seconds, REMOTE_METHODS.index(m)))
    if forced:
        reason = f"{best}: forced by the methods hint"
    else:
        others = [f"{m} {costs[m].seconds:.4g} s" for m in eligible if m != best]
        reason = f"{best}: predicted {costs[best].seconds:.4g} s" + (f" (vs {', '.join(others)})" if others else "")
        left = [f"{m} ({why[m]})" for m in REMOTE_METHODS if m in why]
        if left:
            reason += "; not offered: " + ", ".join(left)
    return RemoteChoice(best, costs[best].seconds, reason, pred)


def _methods(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(m, str) for m in items):
        raise HintError(f"planner hint methods={value!r} must be comma-separated remote methods")
    names = tuple(m.strip() for m in items if m.strip())
    unknown = [m for m in names if m not in REMOTE_METHODS]
    if unknown or not names:
        raise HintError(f"planner hint methods={value!r}: {', '.join(unknown) or 'no method'} is not a remote "
                        f"method; choose from {', '.join(REMOTE_METHODS)}")
    return names


def _threshold(value: Any) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError, OverflowError):
        out = -1
    if out < 0 or isinstance(value, bool):
        raise HintError(f"planner hint superfile_threshold={value!r} must be bytes >= 0")
    return out


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise HintError(f"planner hint {name}={value!r} must be true or false")


# ----------------------------------------------------------------------------- a read's method
class Session(Protocol):
    """What the choice of a read's remote method uses of a session (its communicator, planner and catalog on rank 0)."""

    @property
    def comm(self) -> MPI.Intracomm: ...
    @property
    def size(self) -> int: ...
    @property
    def planner(self) -> Any: ...

    def open_catalog(self) -> Any: ...


_CONSTANTS: "weakref.WeakKeyDictionary[Session, dict[str, RemoteConstants]]" = weakref.WeakKeyDictionary()


def read_method(session: Session, requested: str | None, path: str, statsets: Sequence[Any], shape: Sequence[int],
                dtype: np.dtype, order: str) -> str:
    """The remote method (:data:`sdm.io.remote.METHODS`) of a read of the archive copy *path* (collective on the
    first ``auto`` read of an endpoint in a session).

    A remote name is taken as it is; anything else lets the remote model choose from
    every rank's layout statistics *statsets* (the same on every rank, so is the choice).

    Raises
    ------
    SDMError
        Rank 0's failure to read the stored calibration, on every rank.
    """
    from ..io.remote import METHODS, _packed, _split, is_method

    if is_method(requested):
        return str(requested)
    if _packed(_split(path)[0]):  # fetched whole once, the other members then served from memory
        return "remote-superfile"
    constants = _constants(session, _split(path)[0])
    hints = {"frequency": session.planner.hints["frequency"]} if "frequency" in session.planner.hints else None
    workload = RemoteWorkload(tuple(int(n) for n in shape), dtype.str, session.size, "block", 1, order)
    choice = choose_remote(workload, constants, hints, parts=[s[0] for s in statsets])
    return f"remote-{choice.method}" if f"remote-{choice.method}" in METHODS else "remote-collective"


def _constants(session: Session, location: str) -> RemoteConstants:
    """The remote model's constants for the archive of *location* (looked up once per session and endpoint)."""
    from .._collective import root_call
    from ..storage.backends import SCHEME
    from ..storage.backends.objectstore import resolve_endpoint

    parts = location[len(SCHEME):].split("/")[:-1]  # the bucket and the folders of the object
    endpoint = resolve_endpoint() or ""
    targets = ([archive_target(endpoint)] if endpoint else []) + [
        archive_target(SCHEME + "/".join(parts[:n])) for n in range(len(parts), 0, -1)]
    known = _CONSTANTS.setdefault(session, {})
    if " ".join(targets) in known:
        return known[" ".join(targets)]

    def lookup() -> dict[str, Any] | None:
        for target in targets:
            record = session.open_catalog().latest_calibration(target)
            if record is not None:
                return dict(record["constants"])
        return None

    stored = root_call(session.comm, lookup)
    known[" ".join(targets)] = found = SRB_HPSS_2003 if stored is None else RemoteConstants.from_json(stored)
    return found
