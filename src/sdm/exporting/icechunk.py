"""An Icechunk repository of a run's virtual chunks (``sdm export --format icechunk -o repo/``).

The repository (on the local file system, at *out*) holds the Zarr v3 hierarchy of
:mod:`sdm.exporting.virtual` in one commit on branch ``main``, whose message names the
run and whose metadata are the run's attributes (with ``sdm_run``, ``sdm_application``,
``sdm_created``, ``sdm_nprocs``). Every chunk is a virtual reference into SDM's own
files (``file://`` URLs under the data root, or under ``--root-url``) or the archive
tier's objects (``s3://``), pinned to the time of the export: Icechunk refuses to serve
a chunk whose file or object was changed since. The repository's configuration declares
one virtual chunk container per prefix (the data root, each archive bucket with SDM's
S3 endpoint and region); a reader authorizes them when it opens the repository::

    repo = icechunk.Repository.open(icechunk.local_filesystem_storage("repo"),
                                    authorize_virtual_chunk_access={"file:///data/root/": None})
    ds = xr.open_zarr(repo.readonly_session("main").store, group="fields", consolidated=False)

What the repository holds itself (the ``step`` coordinate, dimension values, copies of
``--materialize``) are ordinary Icechunk chunks. A run still being written is refused:
its files still change, so its chunks would be refused as soon as it wrote again.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RunStateError
from .attributes import run_attrs
from .virtual import Description, Root, Sink, build

if TYPE_CHECKING:
    from ..catalog import RunRecord

__all__ = ["IcechunkSink", "containers"]


def _s3_store(ic: Any) -> Any:
    """The object store configuration of SDM's archive tier (its endpoint and region)."""
    from ..storage.backends.objectstore import resolve_credentials, resolve_endpoint

    endpoint = resolve_endpoint()
    try:
        region = resolve_credentials().region
    except Exception:  # noqa: BLE001 - no credentials here: a reader brings its own; the region defaults
        region = "us-east-1"
    return ic.s3_store(region=region, endpoint_url=endpoint, allow_http=bool(endpoint and endpoint.startswith("http:")),
                       s3_compatible=endpoint is not None, force_path_style=endpoint is not None)


def containers(d: Description, root: Root) -> dict[str, Any]:
    """The virtual chunk containers *d*'s chunks need: ``{url prefix: object store configuration}``."""
    import icechunk as ic

    out: dict[str, Any] = {}
    places = d.places()
    if any(p.fast for p in places):
        prefix = root.uri + "/"
        if root.local:
            out[prefix] = ic.local_filesystem_store(root.path)
        elif prefix.startswith("s3://"):
            out[prefix] = _s3_store(ic)
        else:
            out[prefix] = ic.http_store()
    for p in places:
        if not p.fast:
            bucket = p.url[len("s3://"):].partition("/")[0]
            out.setdefault(f"s3://{bucket}/", None)
    return {k: (v if v is not None else _s3_store(ic)) for k, v in out.items()}


class IcechunkSink(Sink):
    """An Icechunk repository being written (see the module documentation)."""

    format = "icechunk"

    def refuse_open(self, run: int) -> None:
        """A run being written: its files still change, which the repository's pinned chunks refuse.

        Raises
        ------
        RunStateError
        """
        raise RunStateError(f"run {run} is being written: an Icechunk repository pins its files as they are now, "
                            "and the run still changes them; export it once it is closed, or to --format references")

    def write(self, path: Path, d: Description, root: Root, rec: RunRecord) -> list[str]:
        """A new repository at *path*: the hierarchy, its virtual chunks and one commit."""
        import icechunk as ic

        config = ic.RepositoryConfig.default()
        needed = containers(d, root)
        for prefix, store in needed.items():
            config.set_virtual_chunk_container(ic.VirtualChunkContainer(prefix, store))
        repo = ic.Repository.create(ic.local_filesystem_storage(str(path)), config)
        session = repo.writable_session("main")
        build(session.store, d, key_separator="/")
        # modification times are compared to the second (HTTP dates): the next whole second after now
        stamp = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=1)
        for a in d.arrays:
            if a.refs:
                specs = [ic.VirtualChunkSpec(list(index), (f"{root.uri}/{p.url}" if p.fast else p.url), p.offset,
                                             p.length, last_updated_at_checksum=stamp) for index, p in a.refs]
                session.store.set_virtual_refs(a.path, specs, validate_containers=True)
        snapshot = session.commit(f"sdm run {rec.id} of {rec.application}", metadata=run_attrs(rec, json_only=True))
        return [f"icechunk commit {snapshot} on branch main; its readers authorize the virtual chunk containers "
                f"{', '.join(sorted(needed))}"]
