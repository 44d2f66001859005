"""Storage backends: where the bytes of a tier live, behind one interface (:mod:`.base`).

* :mod:`sdm.storage.backends.base` -- :class:`~sdm.storage.backends.base.Backend`, the seam
  the I/O methods move bytes through.
* :mod:`sdm.storage.backends.mpiio` -- the fast tier: files through MPI-IO
  (:class:`~sdm.storage.backends.mpiio.MPIIOBackend`, the session's open-file cache).
* :mod:`sdm.storage.backends.objectstore` -- the archive tier: an S3-compatible object store
  (:class:`~sdm.storage.backends.objectstore.ObjectStore`: ranged GETs, multipart PUTs,
  retries with backoff, :class:`~sdm.errors.StorageError` naming the object).

:func:`object_at` gives the store and key of an archive location.  Submodules are
imported on demand, so importing this package loads no client library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import InvalidArgumentError

if TYPE_CHECKING:
    from .objectstore import ObjectStore

__all__ = ["SCHEME", "is_object", "object_at"]

#: How an archive location starts.
SCHEME = "s3://"
_STORES: dict[tuple[str, str | None], "ObjectStore"] = {}


def is_object(location: str) -> bool:
    """Whether *location* names an object (``s3://...``) rather than a file."""
    return location.startswith(SCHEME)


def object_at(location: str) -> tuple["ObjectStore", str]:
    """The object store of the bucket of *location* ``s3://BUCKET/KEY`` and the object's key.

    One store per bucket and endpoint (``$SDM_S3_ENDPOINT``, ... as
    :func:`~sdm.storage.backends.objectstore.resolve_endpoint` says) per process.

    Raises
    ------
    InvalidArgumentError
        *location* names no object.
    """
    from .objectstore import ObjectStore, resolve_endpoint

    bucket, _, key = location[len(SCHEME):].partition("/") if is_object(location) else ("", "", "")
    if not key:
        raise InvalidArgumentError(f"archive location {location!r} names no object")
    endpoint = resolve_endpoint()
    made = _STORES.get((bucket, endpoint))
    if made is None:
        made = _STORES[(bucket, endpoint)] = ObjectStore(f"{SCHEME}{bucket}", endpoint=endpoint)
    return made, key
