"""Imports, index histories, calibrations and ``writes.reason``.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from sdm.catalog import schema as S

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the tables of irregular applications and the planner; add ``writes.reason``."""
    # index_histories is created with its 0003 column already (as the hand-written migration did)
    S.metadata.create_all(op.get_bind(), tables=list(S.V2_TABLES))
    op.add_column("writes", sa.Column("reason", sa.Text(), nullable=True))
