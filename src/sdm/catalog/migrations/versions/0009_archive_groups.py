"""Groups written to the archive tier: ``groups.archive``.

``s3://BUCKET/PREFIX`` for a group whose writes go to an object store (each of its
data files an object under that prefix, recorded as an archive copy); NULL for a group
written to the fast tier, as every group of an upgraded catalog.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the column ``groups.archive``."""
    op.add_column("groups", sa.Column("archive", sa.String(1024), nullable=True))
