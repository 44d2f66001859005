"""Digests of whole files and objects: what an archive copy's ``checksum`` in the catalog is.

Two forms:

``sha256:<hex>``
    The SHA-256 of the whole file (what :func:`sdm.ops.tiers.migrate` records).
``sha256-parts:<part bytes>:<hex>``
    For an object uploaded in parts by several processes (writes to the archive tier,
    :func:`sdm.io.remote.put_collective`): the SHA-256 of the concatenated binary SHA-256
    digests of its parts, every part *part bytes* long but the last (the form of S3's
    composite checksums).  No process ever holds the whole object, yet anyone with the
    bytes can check them: :func:`file_digest` with ``like=`` computes the same form.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Sequence

from ..errors import InvalidArgumentError, StorageError

__all__ = ["DIGEST", "PARTS", "parts_digest", "file_digest"]

DIGEST = "sha256"
PARTS = "sha256-parts"
_CHUNK = 8 << 20  # bytes read at a time


def parts_digest(part: int, digests: Sequence[bytes]) -> str:
    """The ``sha256-parts`` digest of an object from its parts' binary SHA-256 digests, in order."""
    return f"{PARTS}:{int(part)}:{hashlib.sha256(b''.join(digests)).hexdigest()}"


def file_digest(path: str | Path, like: str | None = None) -> str:
    """The digest of a whole file, in the form of *like* (default ``sha256:``).

    Raises
    ------
    InvalidArgumentError
        *like* is of an unknown form.
    StorageError
        The file cannot be read.
    """
    form, _, rest = (like or DIGEST).partition(":")
    if form == DIGEST:
        part = 0
    elif form == PARTS and rest.partition(":")[0].isdigit() and int(rest.partition(":")[0]) > 0:
        part = int(rest.partition(":")[0])
    else:
        raise InvalidArgumentError(f"unknown digest form {like!r} (known: {DIGEST}:..., {PARTS}:BYTES:...)")
    import mmap

    whole = hashlib.sha256()
    parts: list[bytes] = []
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size:  # hashed from a memory map: no copy of the bytes
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
                    for lo in range(0, size, part or size):
                        h = hashlib.sha256() if part else whole
                        hi = min(size, lo + part) if part else size
                        for start in range(lo, hi, _CHUNK):
                            h.update(view[start:min(hi, start + _CHUNK)])
                        if part:
                            parts.append(h.digest())
    except OSError as exc:
        raise StorageError(f"cannot read {path} for its digest: {exc.strerror}", errno=exc.errno) from None
    if part and not parts:  # an empty file: one empty part
        parts.append(hashlib.sha256().digest())
    return parts_digest(part, parts) if part else f"{DIGEST}:{whole.hexdigest()}"
