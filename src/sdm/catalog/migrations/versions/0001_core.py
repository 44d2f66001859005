"""The core tables (applications, runs, groups, datasets, attributes, files, writes).

Revision ID: 0001
Revises:

A catalog of this revision was made by an SDM before Alembic (``sdm_schema`` version 1);
new catalogs are created at the head revision directly.
"""

from __future__ import annotations

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing to do: the core tables are what the version-1 catalog already holds."""
