"""What the planner's trials learned: the table ``planner_choices``.

One row per storage target and access pattern: the method a trial measured fastest,
the trial's medians and the run that measured it (:mod:`sdm.planner.learned`).  An
upgraded catalog has no rows: its next runs measure as before.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table ``planner_choices``."""
    op.create_table(
        "planner_choices",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("pattern", sa.String(32), nullable=False),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("target", "pattern", name="uq_planner_choices_target_pattern"),
    )
