"""``sdm calibrate s3://BUCKET/PREFIX``: the remote cost model's constants of an object store, measured.

The paper's model (:mod:`sdm.planner.remote`) prices one remote read call as
``T_conn + T_pureopen + T_stage + T_seek + T_read(s) + T_fileclose + T_connclose``. On an
S3 server, measured with the backend SDM reads through
(:class:`~sdm.storage.backends.objectstore.ObjectStore`), each a median of repeats:

=============  ===========================================================================
T_conn         the first request of a new client (connection set-up and signing) minus
               the same request on a warm client
T_pureopen     a HEAD of an existing object on a warm client (the object store's "open")
T_seek         a 1-byte ranged GET far into an object minus one at its start (S3 has no
               seek: about 0)
T_read(s)      a ranged GET of ``s`` bytes on a warm client, for ``s`` from 4 KiB to 16 MiB
               (the points of the piecewise-linear ``T_read``; its small-size plateau is
               the per-request latency, as the paper's 0.56 s below 8 KB)
T_db           one catalog query round trip (the superfile's index look-up)
T_memcopy      copying 1 MiB in memory (serving one dataset from a fetched superfile)
T_stage        0: an object store has no tape to stage from
T_fileclose,   0: there is no close; a client's connections are dropped without a request
T_connclose
T_comm         0 here: the redistribution's cost comes from the MPI calibration of the
               fast tier (``sdm calibrate DIR``), not from the object store
=============  ===========================================================================

The constants and every sample are stored in the catalog under the target
``archive:s3://BUCKET/PREFIX`` (:func:`sdm.planner.remote.archive_target`), where
``sdm predict --tier archive --endpoint s3://BUCKET/PREFIX`` and ``auto`` find them.
"""

from __future__ import annotations

import os
import time
import uuid
from statistics import median
from typing import Any, Callable

import numpy as np

from ..planner.remote import RemoteConstants, archive_target

__all__ = ["calibrate_archive", "SIZES"]

#: Sizes of the ``T_read`` points (bytes).
SIZES = (4096, 65536, 1 << 20, 4 << 20, 16 << 20)
QUICK_SIZES = (4096, 65536, 1 << 20)


def _timed(call: Callable[[], Any], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def calibrate_archive(url: str, catalog_url: str, *, endpoint: str | None = None, quick: bool = False,
                      repeats: int | None = None, progress: Callable[[str], None] | None = None
                      ) -> tuple[int, RemoteConstants, dict[str, Any]]:
    """Measure the remote model's constants of the object store at *url* and store them in the catalog.

    A scratch object (``sdm-calibration-<random>``, the largest ``T_read`` size) is written
    under the prefix and removed at the end.

    Returns
    -------
    (int, RemoteConstants, dict)
        The calibration's id in the catalog, the constants and the raw samples (seconds).

    Raises
    ------
    StorageError
        The object store failed (after its retries).
    """
    from ..catalog import Catalog
    from ..storage.backends.objectstore import ObjectStore

    say = progress or (lambda _text: None)
    n = repeats or (3 if quick else 7)
    sizes = QUICK_SIZES if quick else SIZES
    store = ObjectStore(url, endpoint=endpoint)
    store.ensure_bucket()
    key = f"sdm-calibration-{uuid.uuid4().hex[:12]}"
    samples: dict[str, Any] = {}
    try:
        say("write a scratch object")
        store.put(key, os.urandom(max(sizes)))
        say("connection and open")
        cold = []
        for _ in range(n):
            fresh = ObjectStore(url, endpoint=endpoint)
            t0 = time.perf_counter()
            fresh.head(key)
            cold.append(time.perf_counter() - t0)
        warm = _timed(lambda: store.head(key), n)
        samples.update(first_request=cold, head=warm)
        say("seek")
        samples["get_1_at_start"] = _timed(lambda: store.get_range(key, 0, 1), n)
        samples["get_1_far"] = _timed(lambda: store.get_range(key, max(sizes) - 1, 1), n)
        points = []
        for size in sizes:
            say(f"read {size} B")
            samples[f"get_{size}"] = _timed(lambda: store.get_range(key, 0, size), n)  # noqa: B023 (used at once)
            points.append([size, median(samples[f"get_{size}"])])
        say("catalog and memory")
        cat = Catalog(catalog_url)
        try:
            samples["db"] = _timed(lambda: cat.latest_calibration(archive_target(url)), n)
            buf = np.empty(1 << 20, dtype=np.uint8)
            samples["memcopy_1MiB"] = _timed(lambda: buf.copy(), n)
            constants = RemoteConstants.from_json({
                "T_conn": max(median(cold) - median(warm), 0.0), "T_pureopen": median(warm), "T_stage": 0.0,
                "T_seek": max(median(samples["get_1_far"]) - median(samples["get_1_at_start"]), 0.0),
                "T_fileclose": 0.0, "T_connclose": 0.0, "T_comm": 0.0, "T_db": median(samples["db"]),
                "T_memcopy": median(samples["memcopy_1MiB"]), "T_read": _increasing(points)})
            row = cat.save_calibration(archive_target(url), 1, constants.to_json(), samples)
        finally:
            cat.close()
    finally:
        store.delete(key)
    return row, constants, samples


def _increasing(points: list[list[float]]) -> list[list[float]]:
    """``T_read`` points made non-decreasing in seconds (a larger read never predicted faster: noise)."""
    out, top = [], 0.0
    for size, seconds in points:
        top = max(top, seconds)
        out.append([size, top])
    return out
