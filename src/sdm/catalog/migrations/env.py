"""Alembic environment: migrations run on the connection the catalog hands over.

:class:`sdm.catalog.Catalog` opens a transaction that holds the catalog's schema lock
(``BEGIN IMMEDIATE`` on SQLite, an advisory transaction lock on PostgreSQL), puts the
connection in ``config.attributes["connection"]`` and calls ``alembic.command.upgrade``;
every revision runs inside that one transaction, so concurrent jobs see the schema either
before or after, never half made.
"""

from __future__ import annotations

from alembic import context

from sdm.catalog.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, transaction_per_migration=False)
with context.begin_transaction():
    context.run_migrations()
