"""What the tests of secret masking share: hostile passwords, and the check that none is shown.

A password is *shown* when the text holds it as written, percent-decoded (``%40`` as
``@``, ``+`` as a space), or any piece of it of four characters or more between the
characters where URL parsers cut (``@ : / ? # & =``, spaces, quotes, a backslash): a
parser that split the URL elsewhere may quote such a piece on its own. A piece that the
same path shows for a harmless password too (a word of every message, such as
``catalog``) is not a leak, hence the *baseline* of :func:`assert_clean`.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import unquote, unquote_plus

from hypothesis import strategies as st

__all__ = ["PRINTABLE", "PASSWORDS", "HARMLESS", "LEAKS", "secret_texts", "assert_clean", "everything", "log_records"]

#: Printable ASCII, space to '~'
PRINTABLE = "".join(map(chr, range(0x20, 0x7F)))
#: The characters that break URL parsers, drawn often
BREAKERS = "@:/?#%&=+ '\"\\"
#: Passwords from the printable set, weighted towards the characters that break URL parsers
PASSWORDS = st.lists(st.one_of(st.sampled_from(BREAKERS), st.text(PRINTABLE, min_size=1, max_size=6)),
                     min_size=1, max_size=10).map("".join)
#: A password whose texts appear nowhere by chance (the baseline's)
HARMLESS = "Zq7Zq7Zq7"

#: The three URLs that leaked before masking worked on the raw text, and the text each leaked:
#: an '@' and a ':' in the password (the port became 'TopSecretTail@127.0.0.1:5432'), an '@'
#: (the host became the password's tail), and a password parameter whose name is percent-encoded.
LEAKS = {
    "at and colon": ("postgresql://alice:p@ss:TopSecretTail@127.0.0.1:5432/sdm", "ss:TopSecretTail"),
    "at": ("postgresql://alice:p@ssTopSecretTail@127.0.0.1:1/sdm", "ssTopSecretTail"),
    "encoded parameter name": ("postgresql://127.0.0.1:1/sdm?pass%77ord=TopSecretTail", "TopSecretTail"),
}


def secret_texts(password: str) -> set[str]:
    """What must not be shown: the password as written and decoded (3+ characters), and its pieces of 4+."""
    forms = {password, unquote(password), unquote_plus(password)}
    pieces = {p for f in forms for p in re.split(r"[@:/?#&=\s'\"\\]+", f) if len(p) >= 4}
    return {f for f in forms if len(f) >= 3} | pieces


def assert_clean(shown: str, password: str, baseline: str = "") -> None:
    """No secret text of *password* in *shown*, unless *baseline* (the same path with a harmless password) holds it."""
    for secret in secret_texts(password):
        at = shown.find(secret)
        assert at < 0 or secret in baseline, f"{secret!r} shown in: ...{shown[max(at - 300, 0):at + 300]!r}..."


def everything(exc: BaseException) -> str:
    """All an exception can show: message, repr, formatted traceback, and every exception it links to
    (``__cause__`` and ``__context__``, shown in a traceback or not)."""
    parts: list[str] = []
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        parts += [str(e), repr(e), "".join(traceback.format_exception(e))]
        todo += [e.__cause__, e.__context__]
    return "\n".join(parts)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def log_records() -> Iterator[list[str]]:
    """Every log record of any logger, at DEBUG and above, formatted (with its exception) into the list yielded."""
    handler, root = _Records(), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    lines: list[str] = []
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
        lines.extend(formatter.format(r) for r in handler.records)
