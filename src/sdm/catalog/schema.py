"""Relational schema of the SDM catalog (SQLAlchemy Core), versioned.

The paper's tables, generalized:

=================  ==========================================================
paper              here
=================  ==========================================================
run_table          ``applications`` + ``runs`` (+ run-level ``attributes``)
access_pattern     ``groups`` (organization level) + ``datasets`` (dtype, shape,
                   storage order, the writer's distribution)
execution_table    ``writes``: one row per dataset and time step with file,
                   offset, byte count, checksum, I/O method and seconds
=================  ==========================================================

``attributes`` holds typed key/values for runs, groups and datasets; ``files`` lists
every data file SDM generated, relative to the run's data root.

Irregular applications (section 3.2): ``imports`` is the paper's import_table (data
read from files SDM did not write); ``index_histories`` + ``index_history_parts`` are the
index_table and index_history_table (partitioned index sets of all ranks kept in a
history file, tied to a content hash of the inputs), ``index_history_uses`` records
every reuse.  The planner: ``io_calibrations`` holds measured cost-model constants per
storage target, and ``writes.reason`` says why a method was chosen.

Durability (revision 0004): ``runs.dir`` names the run's directory (unique without the
catalog: ``run-<id>-<UTC time>-<random>``), ``runs.state`` is ``open``, ``closed`` or
``interrupted`` (``runs.writers`` counts the sessions writing it), ``files.alloc_end`` is
the file's high-water mark (space is reserved by raising it in one transaction, so two
writers never share bytes) and ``writes.version`` counts the overwrites of a step (each
version is written to fresh space). ``catalog_info`` holds the catalog's own unique id,
which every run directory records so that SDM never writes into a directory another
catalog created.

The schema's versions are Alembic revisions (``sdm/catalog/migrations``): 0001 = the core
tables; 0002 = imports, index histories, calibrations and ``writes.reason``; 0003 =
``index_histories.sources`` (identity of the input files and hash of the partitioning
vector, so an unchanged mesh is not read again); 0004 = the durability columns above;
0005 = each dataset's step summary (``datasets.nsteps``, ``first_step``, ``last_step``,
``nbytes_written``), kept by the transaction that commits a new step, so listings and
searches read one row per dataset instead of one per write; 0006 = segments:
``groups.kind`` (``state``: written every step, the default; ``topology``: written once or
rarely, e.g. a mesh), ``groups.steps_per_file`` (levels 2 and 3: the data file rolls over
every n steps) and ``groups.truncated_after`` (the step of the group's last truncation:
new steps must come after it); 0007 = ``infos``: named homogeneous arrays kept as metadata
(the paper's PDS infos) on a run, a group, a dataset or one step of a dataset, their
bytes in ``data`` (C order, the byte order of ``dtype``); 0008 = storage tiers:
``copies`` (every copy of a file per tier: location, size, whole-copy checksum, state,
verification time; a file without a row lives on the fast tier only, at its path) and
``tier_operations`` (who migrated, staged or purged what, when, bytes, seconds, outcome);
0009 = ``groups.archive`` (``s3://BUCKET/PREFIX`` of a group written to the archive tier);
0010 = ``datasets.dims`` (the dimension names the writer gave, a JSON list; NULL: none);
0011 = subfiles: ``groups.subfiles`` (K subfiles per step, 0 for ``"auto"``, NULL: one
file), ``writes.extents`` (how many extents a step is cut into; 0: one run of bytes at
the row's file and offset) and ``extents`` (each extent of a subfiled step: its file,
offset, bytes, first byte in the canonical stream, ``xxh3-64`` checksum; the row's
file and offset are its first extent's); 0012 = ``planner_choices``: per storage target
and access pattern (a digest of the access and the session's hints) the method a
trial measured fastest, the trial's medians and the run that measured it
(:mod:`sdm.planner.learned`).
Catalogs made before Alembic carry their version in the table ``sdm_schema``; they are
stamped with the matching revision and upgraded in place on open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Subquery

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy import Table

from . import own as _own

#: The Alembic revision of the schema this SDM writes (the head of ``migrations/versions``; defined in
#: :mod:`sdm.catalog.own`, which imports no SQLAlchemy).
SCHEMA_VERSION = _own.SCHEMA_VERSION

#: Run states (``runs.state``).
RUN_STATES = ("open", "closed", "interrupted")

metadata = MetaData()

#: The version table of catalogs made before Alembic (read only to upgrade them).
schema_info = Table(
    "sdm_schema",
    MetaData(),
    Column("version", Integer, primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

catalog_info = Table(
    "catalog_info",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

applications = Table(
    "applications",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(255), nullable=False, unique=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("application_id", ForeignKey("applications.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("nprocs", Integer, nullable=False),
    Column("problem_size", Text, nullable=True),  # JSON list or string
    Column("root", Text, nullable=False),  # absolute data root the run's files live under
    Column("dir", Text, nullable=True),  # the run's directory, relative to root (0004)
    Column("state", String(16), nullable=False, server_default="closed"),  # open | closed | interrupted
    Column("writers", Integer, nullable=False, server_default="0"),  # sessions writing the run now
    Index("ix_runs_app_created", "application_id", "created_at"),
)

groups = Table(
    "groups",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(255), nullable=False),
    Column("level", Integer, nullable=False),
    Column("position", Integer, nullable=False),
    Column("kind", String(16), nullable=False, server_default="state"),  # state | topology (0006)
    Column("steps_per_file", BigInteger, nullable=True),  # levels 2, 3: steps per data file (0006)
    Column("truncated_after", BigInteger, nullable=True),  # last truncation: new steps come after it (0006)
    Column("archive", String(1024), nullable=True),  # s3://BUCKET/PREFIX of a group written to the archive (0009)
    Column("subfiles", Integer, nullable=True),  # K subfiles per step, 0: auto, NULL: one file (0011)
    UniqueConstraint("run_id", "name", name="uq_groups_run_name"),
)

datasets = Table(
    "datasets",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("group_id", ForeignKey("groups.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(255), nullable=False),
    Column("position", Integer, nullable=False),
    Column("dtype", String(1024), nullable=False),  # sdm.dtypes.dtype_text: '<f8', or a structured dtype's descr
    Column("shape", Text, nullable=False),  # JSON list of ints
    Column("storage_order", String(1), nullable=False),  # 'C' or 'F'
    Column("dims", Text, nullable=True),  # JSON list of dimension names (0010)
    Column("distribution", Text, nullable=True),  # JSON of the writer's data view
    Column("compression", Text, nullable=True),  # the codec pipeline's text (sdm.codecs), NULL: raw bytes (0013)
    Column("chunks", Text, nullable=True),  # a compressed dataset's chunk shape (JSON), NULL: each writer's box (0013)
    # the committed steps' summary, raised with each new step in its commit (0005)
    Column("nsteps", BigInteger, nullable=False, server_default="0"),
    Column("first_step", BigInteger, nullable=True),
    Column("last_step", BigInteger, nullable=True),
    Column("nbytes_written", BigInteger, nullable=False, server_default="0"),
    UniqueConstraint("group_id", "name", name="uq_datasets_group_name"),
)

attributes = Table(
    "attributes",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("group_id", ForeignKey("groups.id", ondelete="CASCADE"), nullable=True),
    Column("dataset_id", ForeignKey("datasets.id", ondelete="CASCADE"), nullable=True),
    Column("key", String(255), nullable=False),
    Column("value_type", String(8), nullable=False),  # int | float | bool | str
    Column("value_num", Float, nullable=True),
    Column("value_str", Text, nullable=False),
    Index("ix_attributes_key_str", "key", "value_str"),
    Index("ix_attributes_key_num", "key", "value_num"),
    Index("ix_attributes_owner", "run_id", "group_id", "dataset_id"),
)

files = Table(
    "files",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("path", Text, nullable=False),  # relative to runs.root
    Column("level", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("alloc_end", BigInteger, nullable=False, server_default="0"),  # high-water mark (0004)
    UniqueConstraint("run_id", "path", name="uq_files_run_path"),
)

writes = Table(
    "writes",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("dataset_id", ForeignKey("datasets.id", ondelete="CASCADE"), nullable=False),
    Column("step", BigInteger, nullable=False),
    Column("file_id", ForeignKey("files.id", ondelete="CASCADE"), nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("nbytes", BigInteger, nullable=False),
    Column("checksum", String(16), nullable=False),  # 16 hex digits (sdm.integrity)
    Column("checksum_algo", String(32), nullable=False),
    Column("method", String(32), nullable=False),
    Column("reason", Text, nullable=True),  # why the planner chose the method (v2)
    Column("seconds", Float, nullable=False),
    Column("nprocs", Integer, nullable=False),
    Column("written_at", DateTime(timezone=True), nullable=False),
    Column("version", Integer, nullable=False, server_default="1"),  # 1 + overwrites of the step (0004)
    Column("extents", Integer, nullable=False, server_default="0"),  # subfiled: its extents (0011)
    # compressed: the codec, the bytes stored (its chunks, in extents) and a lossy codec's largest error (0013)
    Column("codec", Text, nullable=True),
    Column("stored_nbytes", BigInteger, nullable=True),
    Column("max_error", Float, nullable=True),
    UniqueConstraint("dataset_id", "step", name="uq_writes_dataset_step"),
    Index("ix_writes_file_offset", "file_id", "offset"),
)

extents = Table(  # 0011: the extents of a subfiled step, in order (sdm.storage.subfiles)
    "extents",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("write_id", ForeignKey("writes.id", ondelete="CASCADE"), nullable=False),
    Column("seq", Integer, nullable=False),  # 0 .. writes.extents - 1
    Column("file_id", ForeignKey("files.id", ondelete="CASCADE"), nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("nbytes", BigInteger, nullable=False),
    Column("start", BigInteger, nullable=False),  # its first byte in the step's canonical stream
    Column("checksum", String(16), nullable=False),
    Column("checksum_algo", String(32), nullable=False),
    Column("box", Text, nullable=True),  # a compressed chunk: JSON [starts, counts] of its box (0013)
    UniqueConstraint("write_id", "seq", name="uq_extents_write_seq"),
    Index("ix_extents_file_offset", "file_id", "offset"),
)

# ----------------------------------------------------------------------------- version 2

imports = Table(
    "imports",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(255), nullable=False),  # what the application calls the data
    Column("source", Text, nullable=False),  # absolute path of the external file
    Column("offset", BigInteger, nullable=False),
    Column("dtype", String(64), nullable=False),  # numpy dtype.str, byte order included
    Column("count", BigInteger, nullable=False),  # elements read
    Column("shape", Text, nullable=False),  # JSON list: global shape of what was read
    Column("mode", String(16), nullable=False),  # contiguous | map
    Column("nbytes", BigInteger, nullable=False),
    Column("checksum", String(16), nullable=False),  # checksum of the bytes as read ('' if none)
    Column("checksum_algo", String(32), nullable=False, server_default="sum64-v1"),  # its algorithm (0004)
    Column("seconds", Float, nullable=False),
    Column("nprocs", Integer, nullable=False),
    Column("imported_at", DateTime(timezone=True), nullable=False),
    Index("ix_imports_run_name", "run_id", "name"),
    Index("ix_imports_source", "source"),
)

index_histories = Table(
    "index_histories",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("application_id", ForeignKey("applications.id", ondelete="CASCADE"), nullable=False),
    Column("problem", String(255), nullable=False),  # the problem's identity (mesh name ...)
    Column("content_hash", String(64), nullable=False),  # hash of the partitioning inputs
    Column("nprocs", Integer, nullable=False),
    Column("root", Text, nullable=False),  # absolute data root of the history file
    Column("path", Text, nullable=False),  # history file, relative to root
    Column("nbytes", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("run_id", ForeignKey("runs.id", ondelete="SET NULL"), nullable=True),  # creating run
    Column("sources", Text, nullable=True),  # JSON: input file identities + partvec hash (v3)
    UniqueConstraint("application_id", "problem", "content_hash", "nprocs", name="uq_index_history"),
)

index_history_parts = Table(
    "index_history_parts",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("history_id", ForeignKey("index_histories.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(64), nullable=False),  # e.g. edges, nodes, edge_map
    Column("rank", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("count", BigInteger, nullable=False),  # elements
    Column("dtype", String(64), nullable=False),
    Index("ix_index_history_parts", "history_id", "name", "rank"),
)

index_history_uses = Table(
    "index_history_uses",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("history_id", ForeignKey("index_histories.id", ondelete="CASCADE"), nullable=False),
    Column("run_id", ForeignKey("runs.id", ondelete="SET NULL"), nullable=True),
    Column("used_at", DateTime(timezone=True), nullable=False),
    Column("seconds", Float, nullable=False),  # time to load the partition from the history
)

io_calibrations = Table(
    "io_calibrations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("target", Text, nullable=False),  # storage target: absolute directory (+ fs type)
    Column("nprocs", Integer, nullable=False),
    Column("constants", Text, nullable=False),  # JSON: the cost model's fitted constants
    Column("samples", Text, nullable=True),  # JSON: the micro-benchmark measurements
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_io_calibrations_target", "target", "created_at"),
)

V2_TABLES = (imports, index_histories, index_history_parts, index_history_uses, io_calibrations)

# ----------------------------------------------------------------------------- version 7

infos = Table(
    "infos",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("group_id", ForeignKey("groups.id", ondelete="CASCADE"), nullable=True),  # null: on the run
    Column("dataset_id", ForeignKey("datasets.id", ondelete="CASCADE"), nullable=True),  # null: on the group
    Column("step", BigInteger, nullable=True),  # null: on the dataset as a whole
    Column("name", String(255), nullable=False),
    Column("dtype", String(64), nullable=False),  # sdm.dtypes.dtype_text of a plain dtype: '<f8', '|S8'
    Column("shape", Text, nullable=False),  # JSON list of ints
    Column("data", LargeBinary, nullable=False),  # the array's bytes, C order, the dtype's byte order
    Column("checksum", String(16), nullable=False),  # CRC-32 (zlib) of data, 8 hex digits
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("run_id", "group_id", "dataset_id", "step", "name", name="uq_infos_owner_name"),
)

# ----------------------------------------------------------------------------- version 8

#: Storage tiers a file's copy can live on (``copies.tier``).
TIERS = ("fast", "archive")
#: States of a copy: being written, or whole and checked against the catalog's checksums.
COPY_STATES = ("copying", "verified")

copies = Table(
    "copies",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("file_id", ForeignKey("files.id", ondelete="CASCADE"), nullable=False),
    Column("tier", String(16), nullable=False),  # fast | archive
    Column("location", Text, nullable=False),  # fast: the path under the run's root; archive: s3://bucket/key
    Column("size", BigInteger, nullable=False),
    Column("checksum", String(80), nullable=True),  # of the whole copy, "<algorithm>:<hex>"
    Column("state", String(16), nullable=False),  # copying | verified
    Column("verified_at", DateTime(timezone=True), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("file_id", "tier", name="uq_copies_file_tier"),
)

tier_operations = Table(
    "tier_operations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", ForeignKey("runs.id", ondelete="SET NULL"), nullable=True),
    Column("operation", String(16), nullable=False),  # migrate | stage | purge
    Column("tier", String(16), nullable=False),  # the tier copied to (migrate, stage) or removed from (purge)
    Column("who", String(255), nullable=False),  # user@host
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=True),  # null: running, or interrupted
    Column("files", Integer, nullable=False, server_default="0"),
    Column("nbytes", BigInteger, nullable=False, server_default="0"),
    Column("seconds", Float, nullable=True),
    Column("outcome", String(16), nullable=True),  # ok | failed (null: running or interrupted)
    Column("detail", Text, nullable=True),
    Index("ix_tier_operations_run", "run_id", "started_at"),
)


# ----------------------------------------------------------------------------- version 12

planner_choices = Table(
    "planner_choices",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("target", Text, nullable=False),  # storage target, as io_calibrations.target
    Column("pattern", String(32), nullable=False),  # sdm.planner.learned.pattern_digest
    Column("method", String(32), nullable=False),  # the method the trial measured fastest
    Column("summary", Text, nullable=False),  # the trial's medians, winner first
    Column("run_id", Integer, nullable=False),  # the run whose trial measured it (not a key: runs may go)
    Column("measured_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("target", "pattern", name="uq_planner_choices_target_pattern"),
)


def spans() -> "Subquery":
    """Every run of bytes the committed rows hold: ``(write_id, file_id, offset, nbytes)``: a plain row's
    one run, a subfiled row's extents (revision 0011). Space accounting (truncation, ``sdm gc``) reads this."""
    import sqlalchemy as sa

    w, e = writes, extents
    return sa.union_all(
        sa.select(w.c.id.label("write_id"), w.c.file_id, w.c.offset, w.c.nbytes).where(w.c.extents == 0),
        sa.select(e.c.write_id, e.c.file_id, e.c.offset, e.c.nbytes),
    ).subquery("spans")
