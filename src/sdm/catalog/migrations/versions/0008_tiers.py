"""Storage tiers: every copy of every file per tier, and the log of migrations, stages and purges.

The tables ``copies`` and ``tier_operations`` (see :mod:`sdm.catalog.schema`). A file
without a ``copies`` row lives on the fast tier only, at its ``files.path``; an upgraded
catalog has no rows yet.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

from sdm.catalog import schema as S

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the tables ``copies`` and ``tier_operations``."""
    S.metadata.create_all(op.get_bind(), tables=[S.copies, S.tier_operations])
