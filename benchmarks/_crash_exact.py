"""Every catalog row against the exact bytes its writer wrote, on every tier the catalog says holds them.

Used by the maintenance kinds of ``benchmarks/crash.py`` (``_crash_ops.py``).  Like
``_crash_check.py`` it reads the catalog with plain SQL (``_crash_check.query``) and the bytes
with plain file I/O, and adds:

* **copies**: a file with ``copies`` rows is where they say (``fast``: under the run's root;
  ``archive``: an object ``s3://bucket/key``, or a member ``s3://bucket/key@offset`` of a
  superfile), a file without any on the fast tier only.  Every *verified* copy of a row's file
  must hold the row's bytes; archive objects are read with boto3, not SDM's client
  (:class:`Archive`);
* **exact expectations**: the caller says which array each row must hold (``want(row)``), so a
  row holding another run's, group's or step's bytes is bad, not only a torn one;
* **catalog content**: runs, groups, datasets, files, run attributes and writes in a form two
  catalogs can be compared by (``sdm rebuild`` against the catalog it replaces), and the
  catalog's identity (``catalog_info.uuid``).

A row is **bad** when (first that applies, per copy): ``wrong_length`` (``nbytes`` is not the
dataset's size), ``unintended`` (no writer ever wrote it), ``no_verified_copy`` (its file has
``copies`` rows, none verified), ``missing_file`` / ``short_file`` (fast copy), ``missing_object`` /
``short_object`` (archive copy), ``wrong_bytes`` (the bytes differ from the array expected) or
``checksum_mismatch`` (the bytes are right, the checksum recomputed from them is not the row's).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

import _crash_check as check

__all__ = ["Archive", "load_copies", "Sources", "check_exact", "catalog_content", "catalog_identity", "run_states",
           "differences"]

COPIES = """
SELECT f.run_id AS run_id, f.path AS path, c.tier AS tier, c.location AS location, c.size AS size,
       c.checksum AS checksum, c.state AS state
FROM copies c JOIN files f ON f.id = c.file_id
ORDER BY f.run_id, f.path, c.tier
"""

#: What two catalogs are compared by: the queries of :func:`catalog_content` (ids of groups, datasets and
#: files are the catalog's own and left out; a run keeps its id through a rebuild).
CONTENT = {
    "runs": """SELECT r.id, a.name, r.dir, r.nprocs, r.state, r.problem_size FROM runs r
               JOIN applications a ON a.id = r.application_id""",
    "run attributes": """SELECT run_id, key, value_type, value_num, value_str FROM attributes
                         WHERE group_id IS NULL AND dataset_id IS NULL""",
    "groups": "SELECT run_id, name, level, position, kind, steps_per_file, truncated_after FROM groups",
    "datasets": """SELECT g.run_id, g.name, d.name, d.position, d.dtype, d.shape, d.storage_order, d.nsteps,
                   d.first_step, d.last_step, d.nbytes_written FROM datasets d JOIN groups g ON g.id = d.group_id""",
    "files": "SELECT run_id, path, level FROM files",
    "writes": """SELECT g.run_id, g.name, d.name, w.step, f.path, w."offset", w.nbytes, w.checksum, w.checksum_algo,
                 w.version FROM writes w JOIN datasets d ON d.id = w.dataset_id JOIN groups g ON g.id = d.group_id
                 JOIN files f ON f.id = w.file_id""",
}

#: ``sources(row)`` -> ``[(place, bytes or a reason)]``: the row's bytes at every place that must hold them.
Sources = Callable[[check.Row], list[tuple[str, Any]]]


class Archive:
    """An S3 server's objects read (and a trial's prefix removed) with boto3, objects cached whole.

    Parameters
    ----------
    endpoint : str
    env : dict
        ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_REGION``.
    """

    def __init__(self, endpoint: str, env: dict[str, str]) -> None:
        import boto3

        self.client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                                   aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name=env["AWS_REGION"])
        self._cache: dict[str, bytes | None] = {}

    @staticmethod
    def split(location: str) -> tuple[str, str, int | None]:
        """``(bucket, key, member offset or None)`` of ``s3://bucket/key`` or ``s3://bucket/key@offset``."""
        if not location.startswith("s3://"):
            raise ValueError(f"not an archive location: {location!r}")
        head, sep, tail = location.rpartition("@")
        at = None
        if sep and tail.isdigit():
            location, at = head, int(tail)
        bucket, _, key = location[len("s3://"):].partition("/")
        return bucket, key, at

    def get(self, bucket: str, key: str) -> bytes | None:
        """The whole object, or None when there is none."""
        name = f"{bucket}/{key}"
        if name not in self._cache:
            try:
                self._cache[name] = self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
            except self.client.exceptions.NoSuchKey:
                self._cache[name] = None
        return self._cache[name]

    def forget(self) -> None:
        """Drop the cached objects (they may have changed)."""
        self._cache.clear()

    def ensure_bucket(self, bucket: str) -> None:
        try:
            self.client.head_bucket(Bucket=bucket)
        except Exception:  # noqa: BLE001 - any failure: try to make it (an error then says why)
            self.client.create_bucket(Bucket=bucket)

    def keys(self, bucket: str, prefix: str) -> list[str]:
        """Every key under *prefix*."""
        out: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return out

    def remove(self, bucket: str, prefix: str) -> int:
        """Delete every object under *prefix*; how many."""
        keys = self.keys(bucket, prefix)
        for i in range(0, len(keys), 1000):
            self.client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})
        self.forget()
        return len(keys)


def load_copies(url: str) -> dict[tuple[int, str], list[dict[str, Any]]]:
    """The ``copies`` rows of every file, by (run id, file path)."""
    out: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for c in check.query(url, COPIES, table="copies"):
        out[(int(c["run_id"]), str(c["path"]))].append(c)
    return dict(out)


def _from_file(row: check.Row) -> Any:
    if not row.file.exists():
        return "missing_file"
    with open(row.file, "rb") as fh:
        fh.seek(row.offset)
        raw = fh.read(row.nbytes)
    return raw if len(raw) == row.nbytes else "short_file"


def tiers(copies: dict[tuple[int, str], list[dict[str, Any]]], archive: Archive | None) -> Sources:
    """The sources of a row: its fast file when its file has no copies rows, else every verified copy."""

    def sources(row: check.Row) -> list[tuple[str, Any]]:
        found = copies.get((row.run_id, row.path))
        if not found:
            return [("fast", _from_file(row))]
        out: list[tuple[str, Any]] = []
        for c in found:
            if c["state"] != "verified":
                continue
            if c["tier"] == "fast":
                out.append(("fast", _from_file(row)))
                continue
            bucket, key, at = Archive.split(str(c["location"]))
            data = None if archive is None else archive.get(bucket, key)
            start = (at or 0) + row.offset
            if data is None:
                out.append(("archive", "missing_object"))
            elif len(data) < start + row.nbytes:
                out.append(("archive", "short_object"))
            else:
                out.append(("archive", data[start:start + row.nbytes]))
        return out or [("none", "no_verified_copy")]

    return sources


def fast_only(row: check.Row) -> list[tuple[str, Any]]:
    """The sources of a row of a catalog without tiers: its file."""
    return [("fast", _from_file(row))]


def check_exact(rows: list[check.Row], want: Callable[[check.Row], np.ndarray | None],
                sources: Sources = fast_only) -> dict[str, Any]:
    """Judge every row against ``want(row)`` (None: nobody wrote it) at every place ``sources`` names.

    Returns
    -------
    dict
        ``rows``, ``bad`` (list of {id, run, group, dataset, step, path, place, reason, detail}),
        ``checked`` (row copies whose bytes and checksum were compared).
    """
    bad: list[dict[str, Any]] = []
    checked = 0
    for r in rows:
        dtype = np.dtype(r.dtype)
        size = int(np.prod(r.shape, dtype=np.int64)) * dtype.itemsize
        expected = want(r)
        problems: list[tuple[str, str, str]] = []
        if r.nbytes != size:
            problems.append(("-", "wrong_length", f"dataset size is {size}"))
        elif expected is None:
            problems.append(("-", "unintended", ""))
        else:
            wanted = np.asarray(expected, dtype=dtype).tobytes(order="F" if r.order == "F" else "C")
            for place, raw in sources(r):
                if isinstance(raw, str):
                    problems.append((place, raw, ""))
                elif raw != wanted:
                    got = np.frombuffer(raw, dtype=dtype)
                    problems.append((place, "wrong_bytes", f"{int((got == 0).sum())} of {got.size} elements zero"))
                else:
                    checked += 1
                    mine = check.recompute_checksum(raw, r.dtype, r.checksum_algo)
                    if mine is not None and mine != r.checksum.lower():
                        problems.append((place, "checksum_mismatch", f"recomputed {mine}, row says {r.checksum}"))
        bad += [dict(id=r.id, run=r.run_id, group=r.group, dataset=r.dataset, step=r.step, path=r.path, place=place,
                     reason=reason, detail=detail) for place, reason, detail in problems]
    return dict(rows=len(rows), bad=bad, checked=checked)


def catalog_content(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """What :data:`CONTENT` selects from the catalog at *url*, each part sorted."""
    out = {}
    for part, sql in CONTENT.items():
        table = sql.split("FROM", 1)[1].split()[0]
        out[part] = sorted((tuple(row.values()) for row in check.query(url, sql, table=table)), key=repr)
    return out


def differences(want: dict[str, list[tuple[Any, ...]]], got: dict[str, list[tuple[Any, ...]]],
                limit: int = 3) -> list[str]:
    """What *got* lacks or has more than *want*, part by part (at most *limit* examples each)."""
    out = []
    for part in want:
        a, b = set(want[part]), set(got.get(part, []))
        if a - b:
            out.append(f"{part}: {len(a - b)} missing, e.g. {sorted(a - b, key=repr)[:limit]}")
        if b - a:
            out.append(f"{part}: {len(b - a)} unexpected, e.g. {sorted(b - a, key=repr)[:limit]}")
    return out


def catalog_identity(url: str) -> str | None:
    """The catalog's identity (``catalog_info.uuid``: what its run directories' markers name)."""
    got = check.query(url, "SELECT value FROM catalog_info WHERE key = 'uuid'", table="catalog_info")
    return str(got[0]["value"]) if got else None


def run_states(url: str) -> dict[int, str]:
    """Every run's ``state``."""
    return {int(r["id"]): str(r["state"]) for r in check.query(url, "SELECT id, state FROM runs", table="runs")}


def data_files(root: Path) -> list[Path]:
    """The ``*.sdm`` files under *root*."""
    return [f for f in root.rglob("*.sdm") if f.is_file()] if root.is_dir() else []
