"""Every path a record names is confined to its own run.

A catalog row, a meta-file record, a trailer, a superfile index or an archive copy names
files by a path relative to the data root (``<application>/run-.../fields.sdm``) or an
object location (``s3://bucket/prefix/<application>/run-.../fields.sdm``).  Such records
are input, not trusted state: they travel with copied trees and restored archives, and a
catalog can be edited.  Before SDM records, reads, truncates, deletes or uploads anything
a record names, the path is checked here:

* :func:`confine` resolves a path (symbolic links included, ``..`` and absolute paths
  too) and requires it to lie strictly inside the run's own directory
  (``<root>/<run dir>``, itself resolved) without passing through a symbolic link
  below that directory (SDM makes none there; deleting or cutting through one would
  change the file it leads to);
* :func:`confine_location` requires an archive copy's object to lie under the run's
  archive prefix: the object of a whole file is ``<store>/<the file's path>``, a
  superfile is ``<store>/<run dir>/<name>.sdmpack``, and no key segment is empty,
  ``.`` or ``..``.

Anything else raises :class:`~sdm.errors.IntegrityError` naming the record (the caller
says which: a meta-file's file and line, a catalog row's run, dataset, step and path).
So another run's file, the catalog, ``../../etc/passwd``, an absolute path or a link
inside the run leading out of it is never opened for writing, cut or deleted by SDM.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from ..errors import IntegrityError

__all__ = ["run_directory", "confine", "escapes", "confine_location", "location_escapes", "row_record", "refusal",
           "location_refusal"]


def row_record(run_id: int, group: str | None = None, dataset: str | None = None, step: int | None = None,
               extent: int | None = None) -> str:
    """A catalog row as a refusal names it: ``run 2's catalog row of dataset fields/T step 3 (extent 1)``."""
    if dataset is not None:
        what = f" of dataset {group}/{dataset}" + (f" step {step}" if step is not None else "")
    else:
        what = f" of group {group!r}" if group is not None else ""
    return f"run {run_id}'s catalog row{what}" + (f" (extent {extent})" if extent is not None else "")


def run_directory(root: str | Path, rel_dir: str) -> Path:
    """The run's directory ``root / rel_dir``, resolved; it must lie inside the data root.

    Raises
    ------
    IntegrityError
        *rel_dir* is absolute or leads out of the data root.
    """
    base = Path(root).resolve()
    why = _lexical(rel_dir)
    full = (base / rel_dir).resolve() if why is None else base
    if why is None and base not in full.parents:
        why = f"resolves to {full}, outside the data root {base}"
    if why is not None:
        raise IntegrityError(f"the run directory {rel_dir!r} {why}; a run's directory must lie inside its data root")
    return full


def escapes(root: str | Path, rel_dir: str, rel: object) -> str | None:
    """Why the path *rel* (relative to *root*) is not inside the run's directory, or None when it is.

    The path is resolved as the operating system would open it: ``..``, absolute
    paths and symbolic links (in any component, the last included) are followed, so a
    link inside the run that leads out of it is caught.
    """
    if not isinstance(rel, str):
        return f"is a {type(rel).__name__}, not a path"
    why = _lexical(rel)
    if why is not None:
        return why
    base = run_directory(root, rel_dir)
    full = (Path(root).resolve() / rel).resolve(strict=False)
    links = [p for p in _prefixes(Path(root).resolve(), rel) if p.is_symlink()]
    if base not in full.parents:
        how = f" through the symbolic link {links[-1]}" if links else ""
        return f"resolves{how} to {full}, outside the run's directory {base}"
    inner = next((p for p in links if p.parent.resolve() == base or base in p.parent.resolve().parents), None)
    if inner is not None:  # SDM makes no links: one in the run's directory was put there by someone else
        return (f"passes through the symbolic link {inner} inside the run's directory (to {full}); SDM never makes "
                "links there, and would delete or cut the file it leads to")
    return None


def confine(root: str | Path, rel_dir: str, rel: object, record: str) -> Path:
    """The absolute, resolved path of *rel* (relative to *root*), which must lie inside the run's directory.

    Parameters
    ----------
    root : str or Path
        The run's data root.
    rel_dir : str
        The run's directory relative to *root*.
    rel : str
        The path a record names, relative to *root*.
    record : str
        What names it, for the message: ``"<meta-file> line 7 (write of fields/T step 3)"``,
        ``"run 2's catalog row of dataset fields/T step 3"``.

    Raises
    ------
    IntegrityError
        The path is empty, absolute, leads out through ``..`` or a symbolic link, or
        lies in another directory (another run, the catalog's).
    """
    why = escapes(root, rel_dir, rel)
    if why is not None:
        raise IntegrityError(refusal(record, rel, why))
    return (Path(root).resolve() / str(rel)).resolve(strict=False)


def refusal(record: str, rel: object, why: str) -> str:
    """The message of a refused path (:func:`confine`)."""
    return (f"{record} names the path {rel!r}, which {why}; SDM reads, writes and deletes only files inside a run's "
            "own directory, so the record is refused (it was changed or crafted: restore the catalog with "
            "`sdm rebuild` from intact meta-files, or remove the record)")


def location_escapes(location: object, rel_dir: str, path: str, archive: str | None = None) -> str | None:
    """Why the archive copy *location* of the run's file *path* is not under the run's archive prefix, or None.

    The object of a whole file must be ``<archive>/<path>``, a superfile
    ``<archive>/<rel_dir>/.../<name>.sdmpack``; *archive* is the object store's URL when
    known (else any ``s3://bucket/prefix`` in front is accepted).
    """
    from .naming import SUPERFILE_SUFFIX, member

    if not isinstance(location, str) or not location.startswith("s3://"):
        return "is not an s3:// location"
    obj, at = member(location)
    segments = obj[len("s3://"):].split("/")
    if len(segments) < 2 or any(s in ("", ".", "..") for s in segments) or "\\" in obj or "\0" in obj:
        return "has an empty, '.' or '..' segment"
    if archive is not None:
        archive = archive.rstrip("/")
        if not obj.startswith(archive + "/"):
            return f"is not in the archive {archive}"
        key = obj[len(archive) + 1:]
        whole, packed = key == path, key.startswith(rel_dir.strip("/") + "/")
    else:
        whole, packed = obj.endswith("/" + path), f"/{rel_dir.strip('/')}/" in obj
    if at is None and not whole:
        return f"is not the object of the file {path!r} (<archive>/{path})"
    if at is not None and not (packed and obj.endswith(SUPERFILE_SUFFIX)):
        return f"is not a superfile of the run's directory (<archive>/{rel_dir}/<name>{SUPERFILE_SUFFIX})"
    return None


def confine_location(location: object, rel_dir: str, path: str, record: str, archive: str | None = None) -> str:
    """*location* when it lies under the run's archive prefix (see :func:`location_escapes`).

    Raises
    ------
    IntegrityError
        Naming *record*.
    """
    why = location_escapes(location, rel_dir, path, archive)
    if why is not None:
        raise IntegrityError(location_refusal(record, location, path, why))
    return str(location)


def location_refusal(record: str, location: object, path: str, why: str) -> str:
    """The message of a refused archive location (:func:`confine_location`)."""
    return (f"{record} names the archive copy {location!r} of {path!r}, which {why}; SDM reads and deletes only "
            "objects under a run's own archive prefix, so the record is refused")


def _lexical(rel: str) -> str | None:
    """Why *rel* cannot be a relative path under a directory, judged on its text alone (None: it can)."""
    if not rel or not rel.strip():
        return "is empty"
    if "\0" in rel:
        return "contains a NUL character"
    if os.path.isabs(rel) or PurePosixPath(rel).is_absolute():
        return "is absolute"
    if ".." in PurePosixPath(rel).parts:
        return "leads out of its directory through '..'"
    return None


def _prefixes(root: Path, rel: str) -> list[Path]:
    """``root/a``, ``root/a/b``, ... for *rel* = ``a/b/...``: the places a symbolic link can sit."""
    out, at = [], root
    for part in PurePosixPath(rel).parts:
        at = at / part
        out.append(at)
    return out
