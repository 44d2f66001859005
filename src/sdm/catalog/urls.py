"""Catalog URLs as they may be shown: passwords masked.

A catalog URL may carry a password (``postgresql://user:secret@host/db``, or
``?password=secret`` in its query). SDM keeps the real URL only where a connection is
made (the SQLAlchemy engine, which masks it in its own repr) and shows
:func:`redact_url` everywhere else: error messages on every rank, ``Catalog.url``,
``Session.catalog_url``, the ``sdm`` command's output. The masking is SQLAlchemy's
``URL.render_as_string(hide_password=True)`` (the password becomes ``***``), extended
to password query parameters and to strings SQLAlchemy cannot parse.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

__all__ = ["redact_url", "scrub", "mask_urls"]

MASK = "***"

# user:password@ in the authority part, with or without a scheme
_AUTH = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.\-]*://)?[^/@:?#]*:)([^/?#]*)@")
# password=... (libpq also reads passwords from the query string)
_QUERY = re.compile(r"(?i)([?&](?:password|sslpassword|passwd|pwd)=)([^&#]*)")


def redact_url(url: Any) -> str:
    """Return *url* with any password replaced by ``***`` (safe to print or log).

    Parameters
    ----------
    url : str
        A catalog URL, well-formed or not.

    Returns
    -------
    str
        ``postgresql://user:***@host/db`` for ``postgresql://user:secret@host/db``;
        URLs without a password come back unchanged.
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    text = url
    if "@" not in url:  # no user:password@ part (nothing for SQLAlchemy to find; it is not imported)
        return _QUERY.sub(lambda m: m.group(1) + MASK, text)
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        if parsed.password is not None:
            text = parsed.render_as_string(hide_password=True)
    except Exception:  # not parseable by SQLAlchemy: mask by pattern
        text = _AUTH.sub(lambda m: m.group(1) + MASK + "@", url, count=1)
    return _QUERY.sub(lambda m: m.group(1) + MASK, text)


def _secrets(url: str) -> list[str]:
    """Passwords a URL carries, raw and percent-decoded, longest first."""
    found: set[str] = set()
    m = _AUTH.match(url)
    if m and m.group(2):
        found.update({m.group(2), unquote(m.group(2))})
    for q in _QUERY.finditer(url):
        if q.group(2):
            found.update({q.group(2), unquote(q.group(2))})
    try:
        from sqlalchemy.engine import make_url

        password = make_url(url).password
        if password:
            found.add(str(password))
    except Exception:
        pass
    return sorted(found, key=len, reverse=True)


def scrub(text: str, url: Any) -> str:
    """Remove the secrets of *url* from *text* (a driver's error message, for example).

    The URL itself is replaced by its redacted form, then any remaining occurrence of
    its password (raw or percent-decoded, three characters or more) by ``***``.
    """
    if not isinstance(url, str) or not isinstance(text, str):
        return text
    safe = redact_url(url)
    if safe == url:
        return text
    text = text.replace(url, safe)
    for secret in _secrets(url):
        if len(secret) >= 3:
            text = text.replace(secret, MASK)
    return text


# scheme://user:password@ anywhere in a text (the password may not hold '@', '/' or space)
_URL_IN_TEXT = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s/@:'\"]*:)([^\s/@'\"]+)@")


def mask_urls(text: str) -> str:
    """Mask the password of every URL-like ``scheme://user:password@`` in free text.

    A last line of defence for messages SDM did not compose itself (an unexpected
    exception's text); messages SDM composes use :func:`redact_url` on the URL.
    """
    if not isinstance(text, str):
        return text
    text = _URL_IN_TEXT.sub(lambda m: m.group(1) + MASK + "@", text)
    return _QUERY.sub(lambda m: m.group(1) + MASK, text)
