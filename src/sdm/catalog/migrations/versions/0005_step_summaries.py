"""Step summaries: each dataset's number of committed steps, first and last step, and bytes.

Kept by the transaction that commits a new step (``Catalog.record_writes``), so a listing
or a search reads one row per dataset, not one per write. The upgrade computes them from
the ``writes`` already recorded.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the columns and fill them from the writes."""
    op.add_column("datasets", sa.Column("nsteps", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("datasets", sa.Column("first_step", sa.BigInteger(), nullable=True))
    op.add_column("datasets", sa.Column("last_step", sa.BigInteger(), nullable=True))
    op.add_column("datasets", sa.Column("nbytes_written", sa.BigInteger(), nullable=False, server_default="0"))
    op.get_bind().execute(sa.text(
        "UPDATE datasets SET "
        "nsteps = (SELECT COUNT(*) FROM writes w WHERE w.dataset_id = datasets.id), "
        "first_step = (SELECT MIN(w.step) FROM writes w WHERE w.dataset_id = datasets.id), "
        "last_step = (SELECT MAX(w.step) FROM writes w WHERE w.dataset_id = datasets.id), "
        "nbytes_written = COALESCE((SELECT SUM(w.nbytes) FROM writes w WHERE w.dataset_id = datasets.id), 0)"
    ))

