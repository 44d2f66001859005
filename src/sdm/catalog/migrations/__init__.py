"""Alembic migrations of the catalog schema (run by :class:`sdm.catalog.Catalog` on open)."""
