"""URLs as they may be shown: passwords and keys masked, whatever they contain.

Every layer that may print a URL or an error message masks it here, below all of them
(the catalog, the object store, the collective error exchange, the ``sdm`` command).
A catalog URL may carry a password (``postgresql://user:secret@host/db``, or
``?password=secret`` in its query). SDM keeps the real URL only where a connection is
made (the SQLAlchemy engine, which masks it in its own repr) and shows
:func:`redact_url` everywhere else: error messages on every rank, ``Catalog.url``,
``Session.catalog_url``, the ``sdm`` command's output.

The masking works on the raw text, never on a parse of it, so it holds for URLs that do
not parse or that a parser splits elsewhere (a password holding ``@``, ``:``, ``/``,
``?``, ``#``, ``%`` or spaces, raw or percent-encoded):

* the user part: every character between ``scheme://`` and the **last** ``@`` of the
  URL (a password may hold ``@``, so the last one is taken to end it; the host follows
  it) becomes ``***``. The user name before the first ``:`` stays visible when it is
  unambiguous (none of ``@ / ? #``, no space or quote), giving ``user:***@host``;
  the ``@OFFSET`` of a superfile's member (``s3://bucket/run/x.sdmpack@4096``) is SDM's
  own syntax, not the end of a user part;
  a user part without ``:`` and without those characters is a plain user name and is
  kept. ``sqlite:///path`` has no user part (a ``@`` in a file name is kept). Text
  without a scheme is masked the same way when what precedes its last ``@`` holds a
  ``:`` (``user:secret@host/db``).
* the query: the value of every parameter whose name, percent-decoded and in any case,
  is ``password``, ``sslpassword``, ``passwd`` or ``pwd`` becomes ``***``, up to the
  next ``&name=`` (a raw ``&`` that does not start another parameter stays inside it).

:func:`scrub` then removes a URL's secrets from text that SDM did not compose (a
driver's error message): the URL, and the hidden parts raw, percent-decoded and cut at
the URL's delimiters (a parser that split a password at its ``@`` may quote a piece of
it). :func:`mask_urls` is the last line of defence for free text, line by line. A
PostgreSQL URL that connection libraries would split elsewhere (more than one ``@``) is
refused before any connection (:func:`misparse`), so no server is ever asked for a host
made of a password's tail.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, unquote_plus

__all__ = ["redact_url", "scrub", "mask_urls", "secrets_of", "misparse"]

MASK = "***"

#: Query parameters that carry a password (libpq reads these; compared lower-case, decoded)
SECRET_KEYS = frozenset({"password", "sslpassword", "passwd", "pwd"})

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# characters that make a user name ambiguous (it may hold part of a password)
_AMBIGUOUS = re.compile(r"[@/?#\s'\"\\]")
# a value masked already, in free text: *** then a quote, a space or the end
_MASKED = re.compile(r"\*\*\*(?=['\"\s]|$)")
# one query parameter (after '?' or '&'): its name, then its value up to the next '&name=' (or the end)
_PARAM = re.compile(r"(?<=[?&])(?P<key>[^&=?]*)=(?P<value>.*?)(?=&[^&=?]*=|$)", re.S)
# where a parser may cut a password: the URL's delimiters, spaces and quotes
_PIECES = re.compile(r"[@:/?#&=\s'\"\\]+")
# the offset of a superfile's member after its object's name (sdm.ops.tiers): not a user part's end
_MEMBER = re.compile(r"@\d+(?![^\s'\"),\]>])")
#: Pieces of a secret at least this long are scrubbed from text on their own.
PIECE = 4


def _user_part(userinfo: str, user: bool = True) -> tuple[str, str]:
    """``(shown, hidden)`` of a user part (what precedes the last ``@``); *hidden* is its end.

    *user* False hides the user name too (an S3 access key written as one).
    """
    if not user:
        return MASK, userinfo
    if ":" not in userinfo:
        if not _AMBIGUOUS.search(userinfo):
            return userinfo, ""  # a plain user name: no password
        return MASK, userinfo
    name = userinfo.split(":", 1)[0]
    if _AMBIGUOUS.search(name):
        return MASK, userinfo
    return f"{name}:{MASK}", userinfo[len(name) + 1:]


def _split(url: str) -> tuple[str, str | None]:
    """``(head, userinfo)``: *head* up to ``scheme://`` (or empty), *userinfo* between it and the
    last ``@`` (None when there is none)."""
    m = _SCHEME.match(url)
    head = m.group(0) if m else ""
    rest = url[len(head):]
    at = rest.rfind("@")
    while at >= 0 and _MEMBER.match(rest, at) and rest[:at].endswith(".sdmpack"):
        at = rest.rfind("@", 0, at)  # "<superfile>.sdmpack@<offset>": a member's place, SDM's own syntax
    if at < 0:
        return head, None
    if head.lower().startswith("sqlite") and rest.startswith("/"):  # sqlite:///path: a file name, no user part
        return head, None
    if not head and ":" not in rest[:at]:  # a plain path with an '@' in it
        return head, None
    return head, rest[:at]


def _redact(url: str, free: bool = False, user: bool = True) -> tuple[str, list[str]]:
    """The shown form of *url* and the texts it hides (*free*: a URL cut out of free text, where a
    value already masked, ``***`` then a quote, a space or the end, is left with the rest of the message;
    *user* False: the user name is hidden too)."""
    head, userinfo = _split(url)
    spans: list[tuple[int, int]] = []
    if userinfo is not None:
        _, secret = _user_part(userinfo, user)
        if secret:
            end = len(head) + len(userinfo)
            spans.append((end - len(secret), end))
    for m in _PARAM.finditer(url, len(head)):
        key, value = unquote_plus(m.group("key")).strip().lower(), m.group("value")
        if key in SECRET_KEYS and value and value != MASK and not (free and _MASKED.match(value)):
            spans.append(m.span("value"))
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, pos = [], 0
    for start, end in merged:
        out += [url[pos:start], MASK]
        pos = end
    out.append(url[pos:])
    return "".join(out), [url[start:end] for start, end in merged]


def redact_url(url: Any, *, user: bool = True) -> str:
    """Return *url* with any password replaced by ``***`` (safe to print or log).

    Parameters
    ----------
    url : str
        A catalog URL, well-formed or not (see the module documentation for the rule).
    user : bool
        Show an unambiguous user name (default); False hides the whole user part
        (``s3://***@host``: an access key is a credential too).

    Returns
    -------
    str
        ``postgresql://user:***@host/db`` for ``postgresql://user:secret@host/db`` (also
        for ``postgresql://user:s@c:r/t@host/db``); URLs without a password come back
        unchanged; anything but a string becomes ``<typename>``.
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    return _redact(url, user=user)[0]


def secrets_of(url: Any) -> list[str]:
    """The texts of *url* that must never be shown, longest first.

    Each hidden part (see :func:`redact_url`), raw, percent-decoded (``%40``) and
    form-decoded (``+`` as space), and the pieces of those of at least :data:`PIECE`
    characters between the URL's delimiters (``@ : / ? # & =``, spaces, quotes), which a
    parser that split the URL elsewhere may quote on their own. Also the password as
    SQLAlchemy parses it, when it does.
    """
    if not isinstance(url, str):
        return []
    found: set[str] = set()
    for part in _redact(url)[1]:
        for form in (part, unquote(part), unquote_plus(part)):
            found.add(form)
            found.update(p for p in _PIECES.split(form) if len(p) >= PIECE)
    if "@" in url or "?" in url:
        try:
            from sqlalchemy.engine import make_url

            password = make_url(url).password
            if password:
                found.add(str(password))
        except Exception:  # noqa: BLE001 - unparseable: the raw rule above covers it
            pass
    found.discard(MASK)
    return sorted((s for s in found if s), key=len, reverse=True)


def scrub(text: str, url: Any) -> str:
    """Remove the secrets of *url* from *text* (a driver's error message, for example).

    The URL itself (and the form SQLAlchemy is given, ``postgresql+psycopg://``) is
    replaced by its redacted form, then every secret of :func:`secrets_of` of three
    characters or more by ``***``, then :func:`mask_urls` masks any URL left.
    """
    if not isinstance(url, str) or not isinstance(text, str):
        return text
    safe = redact_url(url)
    if safe != url:
        _, rest = url.split("://", 1) if "://" in url else ("", url)
        for form in (url, "postgresql+psycopg://" + rest):
            text = text.replace(form, safe)
        for secret in secrets_of(url):
            if len(secret) >= 3:
                text = text.replace(secret, MASK)
    return mask_urls(text)


# where a URL starts in free text: at the line's start or after a space, quote, bracket, '=' or ','
_URL_START = re.compile(r"(?:(?<=^)|(?<=[\s'\"(\[<=,]))[A-Za-z][A-Za-z0-9+.\-]*://")


def _mask_line(line: str) -> str:
    starts = [m.start() for m in _URL_START.finditer(line)]
    if not starts:
        return line
    out = [line[:starts[0]]]
    for i, start in enumerate(starts):  # each URL runs to the next one (or the end of the line)
        end = starts[i + 1] if i + 1 < len(starts) else len(line)
        out.append(_redact(line[start:end], free=True)[0])
    return "".join(out)


def mask_urls(text: str) -> str:
    """Mask the user part and password parameters of every ``scheme://`` URL in free text.

    A last line of defence for messages SDM did not compose itself (an unexpected
    exception's text); messages SDM composes use :func:`redact_url` on the URL. Free text
    does not say where a URL ends, so each one is taken to run to the next URL or the end
    of its line: everything between ``scheme://`` and the line's last ``@`` is hidden
    (more than the password, at worst), and password parameters up to the next ``&name=``.
    """
    if not isinstance(text, str) or "://" not in text:
        return text
    return "\n".join(_mask_line(line) for line in text.split("\n"))


def misparse(url: str) -> str | None:
    """Why the PostgreSQL URL *url* cannot be used as written, or None.

    Connection libraries end the user part at the first ``@``: with a raw ``@`` in a
    password (or in a parameter) the rest of the password becomes the host or the port,
    and the server would be asked for a host made of the password's tail. A URL with
    more than one ``@`` is therefore refused before any connection, with what to do; so
    is one the URL parser refuses (its message scrubbed).
    """
    head, _ = _split(url)
    if url.count("@", len(head)) > 1:
        return _ENCODE
    try:
        from sqlalchemy.engine import make_url

        make_url(url)
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises ValueError (a port), ArgumentError, ...
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"it does not parse ({scrub(first, url)})"
    return None


_ENCODE = ("it holds more than one at sign, and connection libraries end the user name and password at the "
           "first; write an at sign in a password, a user name or a parameter percent-encoded as %40 (a colon as "
           "%3A, a slash as %2F, a question mark as %3F, a number sign as %23, a percent sign as %25, a space as "
           "%20)")
