"""Catalog URLs as shown: passwords masked (SQLAlchemy's hide_password, and more)."""

from __future__ import annotations

import pytest

from sdm.catalog import normalize_url, redact_url
from sdm.catalog.urls import mask_urls, scrub
from sdm.errors import CatalogUnavailableError


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u:secret@h:5432/db", "postgresql://u:***@h:5432/db"),
    ("postgres://u:s%40cret@h/db", "postgres://u:***@h/db"),
    ("postgresql+psycopg://u:p:q@h/db", "postgresql+psycopg://u:***@h/db"),
    ("postgresql://h/db?password=secret&sslmode=disable", "postgresql://h/db?password=***&sslmode=disable"),
    ("postgresql://u:secret@h:port/db", "postgresql://u:***@h:port/db"),  # unparseable port
    ("u:secret@h/db", "u:***@h/db"),  # no scheme at all
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("sqlite:////tmp/a b/catalog.db", "sqlite:////tmp/a b/catalog.db"),
    ("catalog.db", "catalog.db"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_scrub_removes_the_url_and_its_password_from_any_text() -> None:
    url = "postgresql://u:s%40cret-pw@h/db"
    text = f"cannot use {url}; the server said s@cret-pw and s%40cret-pw"
    assert scrub(text, url) == "cannot use postgresql://u:***@h/db; the server said *** and ***"
    assert scrub("nothing secret", "sqlite:///x.db") == "nothing secret"


def test_mask_urls_in_free_text() -> None:
    text = "failed: 'postgresql+psycopg://u:pw%40x@h:5/d?password=zz&a=1' then postgres://v:abc@k/x"
    assert mask_urls(text) == "failed: 'postgresql+psycopg://u:***@h:5/d?password=***&a=1' then postgres://v:***@k/x"


@pytest.mark.parametrize("url, message", [
    ("u:secret@host/db", "catalog URL 'u:***@host/db' is not a URL; use sqlite:///path/to/catalog.db or "
                         "postgresql://user@host:port/dbname"),
    ("u:secret@host://db", "catalog URL 'u:***@host://db' has no valid scheme; use sqlite:/// or postgresql://"),
    ("mysql://u:secret@h/db", "catalog URL scheme 'mysql' is not supported; use sqlite:/// or postgresql://"),
])
def test_bad_urls_are_refused_without_their_password(url: str, message: str) -> None:
    with pytest.raises(CatalogUnavailableError) as info:
        normalize_url(url)
    assert str(info.value) == message
