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
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy import Table

SCHEMA_VERSION = 1

metadata = MetaData()

schema_info = Table(
    "sdm_schema",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
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
    UniqueConstraint("run_id", "name", name="uq_groups_run_name"),
)

datasets = Table(
    "datasets",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("group_id", ForeignKey("groups.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(255), nullable=False),
    Column("position", Integer, nullable=False),
    Column("dtype", String(64), nullable=False),  # numpy dtype.str, e.g. '<f8'
    Column("shape", Text, nullable=False),  # JSON list of ints
    Column("storage_order", String(1), nullable=False),  # 'C' or 'F'
    Column("distribution", Text, nullable=True),  # JSON of the writer's data view
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
    Column("checksum", String(16), nullable=False),  # hex of the sum64 checksum
    Column("checksum_algo", String(32), nullable=False),
    Column("method", String(32), nullable=False),
    Column("seconds", Float, nullable=False),
    Column("nprocs", Integer, nullable=False),
    Column("written_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("dataset_id", "step", name="uq_writes_dataset_step"),
    Index("ix_writes_file_offset", "file_id", "offset"),
)
