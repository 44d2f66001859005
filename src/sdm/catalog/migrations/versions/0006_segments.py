"""Segments: a group's kind, its steps per data file and its last truncation.

``groups.kind`` is ``state`` (written every step; what every group made before this
revision is) or ``topology`` (written once or rarely, e.g. a mesh); ``groups.steps_per_file``
(levels 2 and 3) makes the data file roll over every n steps (NULL: one file);
``groups.truncated_after`` is the step after which the group was last truncated
(``Session.truncate``): new steps must come after it (NULL: never truncated).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the columns (every existing group is a state group in one file, never truncated)."""
    op.add_column("groups", sa.Column("kind", sa.String(16), nullable=False, server_default="state"))
    op.add_column("groups", sa.Column("steps_per_file", sa.BigInteger(), nullable=True))
    op.add_column("groups", sa.Column("truncated_after", sa.BigInteger(), nullable=True))
