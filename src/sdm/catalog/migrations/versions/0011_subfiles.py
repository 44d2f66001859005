"""Subfiles: ``groups.subfiles``, ``writes.extents`` and the table ``extents``.

A subfiled group (``make_group(subfiles=K)``) stores each dataset step as K extents of
its canonical bytes, each in its own subfile (:mod:`sdm.storage.subfiles`).
``groups.subfiles`` is K (0: ``"auto"``, NULL: one file, as every group of an upgraded
catalog); ``writes.extents`` counts a step's extents (0 for every row written before);
``extents`` lists them: file, offset, bytes, first byte in the step's canonical stream and
``xxh3-64`` checksum.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``groups.subfiles``, ``writes.extents`` and the table ``extents``."""
    op.add_column("groups", sa.Column("subfiles", sa.Integer(), nullable=True))
    op.add_column("writes", sa.Column("extents", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "extents",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("write_id", sa.Integer(), sa.ForeignKey("writes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("file_id", sa.Integer(), sa.ForeignKey("files.id", ondelete="CASCADE"), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("nbytes", sa.BigInteger(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("checksum", sa.String(16), nullable=False),
        sa.Column("checksum_algo", sa.String(32), nullable=False),
        sa.UniqueConstraint("write_id", "seq", name="uq_extents_write_seq"),
    )
    op.create_index("ix_extents_file_offset", "extents", ["file_id", "offset"])
