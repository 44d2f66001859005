"""Dimension names of datasets: ``datasets.dims``.

A JSON list of the names the writer gave (``make_group(dims=...)`` or
``sdm.Dataset(dims=...)``), which the xarray backend and the exports use; NULL when none
were given, as for every dataset of an upgraded catalog.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the column ``datasets.dims``."""
    op.add_column("datasets", sa.Column("dims", sa.Text(), nullable=True))
