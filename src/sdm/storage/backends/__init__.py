"""Storage backends: where the bytes of a tier live.

* :mod:`sdm.storage.backends.objectstore` -- an S3-compatible object store
  (:class:`~sdm.storage.backends.objectstore.ObjectStore`: ranged GETs, multipart PUTs,
  retries with backoff, :class:`~sdm.errors.StorageError` naming the object).

Submodules are imported on demand, so importing this package loads no client library.
"""

from __future__ import annotations
