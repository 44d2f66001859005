"""``index_histories.sources``.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the input identities of an index history (already there when 0002 made the table)."""
    cols = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("index_histories")}
    if "sources" not in cols:
        op.add_column("index_histories", sa.Column("sources", sa.Text(), nullable=True))
