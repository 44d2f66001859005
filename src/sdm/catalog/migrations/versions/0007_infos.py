"""Infos: named homogeneous arrays kept as metadata on a run, group, dataset or step.

The table ``infos`` (see :mod:`sdm.catalog.schema`); an upgraded catalog has none yet.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

from sdm.catalog import schema as S

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table ``infos``."""
    S.metadata.create_all(op.get_bind(), tables=[S.infos])
