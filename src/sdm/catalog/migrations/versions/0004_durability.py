"""Durability: run directories and states, file high-water marks, write versions, catalog id;
``datasets.dtype`` wide enough for structured dtypes; ``imports.checksum_algo``.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

from sdm.storage.naming import component

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the columns; existing runs keep their ``run-NNNNNN`` directories and are closed."""
    op.create_table(
        "catalog_info",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.add_column("runs", sa.Column("dir", sa.Text(), nullable=True))
    op.add_column("runs", sa.Column("state", sa.String(16), nullable=False, server_default="closed"))
    op.add_column("runs", sa.Column("writers", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("files", sa.Column("alloc_end", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("writes", sa.Column("version", sa.Integer(), nullable=False, server_default="1"))
    # 0002 creates imports from the current table definition, so it may hold the column already
    if "checksum_algo" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("imports")}:
        op.add_column("imports", sa.Column("checksum_algo", sa.String(32), nullable=False, server_default="sum64-v1"))
    con = op.get_bind()
    if con.dialect.name != "sqlite":  # SQLite does not enforce VARCHAR lengths
        op.alter_column("datasets", "dtype", type_=sa.String(1024), existing_nullable=False)
    con.execute(sa.text("INSERT INTO catalog_info (key, value) VALUES ('uuid', :u)"), {"u": uuid.uuid4().hex})
    # the directory SDM derived from the application and the id before 0004
    rows = con.execute(sa.text("SELECT r.id, a.name FROM runs r JOIN applications a ON a.id = r.application_id"))
    for run_id, app in rows.fetchall():
        con.execute(sa.text("UPDATE runs SET dir = :d WHERE id = :i"),
                    {"d": f"{component(app)}/run-{run_id:06d}", "i": run_id})
    # each file's high-water mark: the end of its last recorded write
    con.execute(sa.text(
        "UPDATE files SET alloc_end = COALESCE((SELECT MAX(w.\"offset\" + w.nbytes) FROM writes w "
        "WHERE w.file_id = files.id), 0)"
    ))
