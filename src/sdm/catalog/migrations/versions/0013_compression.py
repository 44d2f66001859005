"""Compression: ``datasets.compression``/``chunks``, ``writes.codec``/``stored_nbytes``/``max_error`` and ``extents.box``.

A compressed dataset (``make_group(compression=...)``, :mod:`sdm.codecs`) keeps its codec
pipeline's canonical text in ``datasets.compression`` (NULL: raw bytes, as every dataset
of an upgraded catalog) and its chunk shape in ``datasets.chunks`` (NULL: each writer's
box is one chunk).  Each step of it is stored as chunks, one row of ``extents`` per
chunk (file, offset, stored bytes, ``xxh3-64`` of the stored bytes) with its ``box`` in the
array (JSON ``[starts, counts]``); the step's row records the codec, the bytes stored and,
for a lossy codec, the largest error measured at write time.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the compression columns."""
    op.add_column("datasets", sa.Column("compression", sa.Text(), nullable=True))
    op.add_column("datasets", sa.Column("chunks", sa.Text(), nullable=True))
    op.add_column("writes", sa.Column("codec", sa.Text(), nullable=True))
    op.add_column("writes", sa.Column("stored_nbytes", sa.BigInteger(), nullable=True))
    op.add_column("writes", sa.Column("max_error", sa.Float(), nullable=True))
    op.add_column("extents", sa.Column("box", sa.Text(), nullable=True))

