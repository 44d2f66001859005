"""Secrets are never shown, whatever characters they hold (no server, no MPI).

A property (Hypothesis) draws passwords from the printable ASCII set (space to ``~``),
weighted towards the characters that break URL parsers (``@ : / ? # % & = +``, spaces,
quotes, backslashes), and writes them into catalog URLs in every form a user may type:
raw or percent-encoded in the user part, percent-encoded or raw in the query, and
without a scheme. Through every path that shows a catalog URL without a server --
:func:`redact_url`, :func:`scrub` of a driver's message, ``Catalog(url)``'s exception
(message, ``repr``, formatted traceback, every chained cause and context), the log
records written meanwhile, and the ``sdm ls / show / find`` commands (tables and
``--json``) with one more command that opens a catalog (``verify``, ``gc``, ``export``,
``rebuild``, ...) -- neither the password nor its percent-decoded form nor any piece of it
(four characters or more between URL delimiters, what a parser that split the URL
elsewhere would quote) appears, unless the same text is shown for a harmless password
too (a password such as ``catalog`` is a word of every message). S3 credentials go the
same way through :class:`~sdm.storage.backends.objectstore.ObjectStore`'s messages and
``repr``. The three URLs that leaked before this rule are checked by name, through the
``sdm`` command run as a subprocess.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
import typer
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st

from sdm._cli.main import app
from sdm.catalog import Catalog, redact_url
from sdm.catalog.urls import MASK, mask_urls, scrub, secrets_of
from sdm.errors import CatalogUnavailableError, InvalidArgumentError, StorageError
from secret_checks import HARMLESS, LEAKS, PASSWORDS, assert_clean, everything, log_records  # tests/integration

pytestmark = pytest.mark.timeout(600)

SRC = Path(__file__).resolve().parents[2] / "src"
EXAMPLES = int(os.environ.get("SDM_SECRET_EXAMPLES", "150"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
                    print_blob=False)

CLOSED = 1  # 127.0.0.1:1 refuses at once: a connection is attempted, nothing answers

FORMS = {
    "raw": lambda pw: f"postgresql://alice:{pw}@127.0.0.1:{CLOSED}/sdm",
    "encoded": lambda pw: f"postgresql://alice:{quote(pw, safe='')}@127.0.0.1:{CLOSED}/sdm",
    "query": lambda pw: f"postgresql://alice@127.0.0.1:{CLOSED}/sdm?sslmode=disable&password={quote(pw, safe='')}",
    "query-raw": lambda pw: f"postgresql://alice@127.0.0.1:{CLOSED}/sdm?password={pw}&connect_timeout=5",
    "no scheme": lambda pw: f"alice:{pw}@127.0.0.1/sdm",
}

def catalog_error(url: str) -> str:
    """Everything shown when ``Catalog(url)`` fails, log records written meanwhile included."""
    with log_records() as logged, pytest.raises(CatalogUnavailableError) as info:
        Catalog(url, create=False)
    return everything(info.value) + "\n" + "\n".join(logged)


@functools.lru_cache(maxsize=1)
def _command() -> typer.core.TyperGroup:
    return typer.main.get_command(app)  # built once: typer's runner rebuilds it on every call


def cli(*args: str) -> str:
    """stdout and stderr of one ``sdm`` command (in process); it must fail with one ``error:`` line."""
    result = CliRunner().invoke(_command(), list(args), env={"COLUMNS": "200", "SDM_CATALOG": None})
    assert result.exit_code == 1, (args, result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return result.stdout + result.stderr


#: Every other command that opens a catalog: one is drawn per example, beside ls, show and find
OTHERS = [("verify", "1"), ("verify",), ("gc", "1"), ("histories", "heat"), ("stage", "1"), ("purge", "1"),
          ("plot", "1", "T", "--step", "0"), ("export", "1", "-f", "hdf5", "-o", "{tmp}/x.h5"),
          ("rebuild", "{tmp}")]


@functools.lru_cache(maxsize=None)
def shown_for(url: str, other: tuple[str, ...] = ()) -> str:
    """Everything SDM shows for *url* without a server (*other*: one more command)."""
    parts = [redact_url(url), catalog_error(url)]
    for args in (("ls",), ("ls", "--json"), ("show", "1", "--json"), ("find", "a=1"), *([other] if other else [])):
        parts.append(cli(*args, "--catalog", url))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("commands")


@pytest.mark.parametrize("form", sorted(FORMS))
@PROPERTY
@given(password=PASSWORDS, other=st.sampled_from(OTHERS))
@example(password="p@ss:TopSecretTail", other=OTHERS[0])
@example(password="a/b?c#d%40e f:g@h", other=OTHERS[-1])
@example(password="%zz%4", other=OTHERS[-2])
def test_no_error_path_shows_the_password(scratch: Path, form: str, password: str, other: tuple[str, ...]) -> None:
    if form == "query-raw":  # a raw '&name=' starts another parameter: in any URL parser, not a password
        assume(not re.search(r"&[^&=?]*=", password))
    url = FORMS[form](password)
    other = tuple(a.format(tmp=scratch) for a in other)
    baseline = shown_for(FORMS[form](HARMLESS), other)
    shown = shown_for(url, other)
    assert_clean(shown, password, baseline)
    assert MASK in redact_url(url) or form == "no scheme" and "@" not in password and ":" not in password


@PROPERTY
@given(password=PASSWORDS)
def test_scrub_removes_every_form_of_the_password_from_a_driver_message(password: str) -> None:
    url = FORMS["raw"](password)
    # what a driver that split the URL at its first '@' may say: the URL, the password, its pieces, its tail
    tail = password.split("@", 1)[-1]
    message = (f"connection to {url} ({url.replace('postgresql://', 'postgresql+psycopg://')}) failed: "
               f"host {tail!r}, password {password!r} / {quote(password, safe='')} / {password.split(':')[-1]}")
    baseline = scrub(message.replace(password, HARMLESS).replace(quote(password, safe=""), HARMLESS),
                     FORMS["raw"](HARMLESS))
    assert_clean(scrub(message, url), password, baseline)
    for secret in secrets_of(url):
        assert secret not in redact_url(url) or secret in FORMS["raw"](HARMLESS)


@PROPERTY
@given(password=PASSWORDS)
def test_mask_urls_in_free_text(password: str) -> None:
    """Free text does not say where a URL ends: each one runs to the next URL or the end of its line."""
    assume(not re.search(r"[A-Za-z]://", password))  # a URL inside a password would start another URL
    for form in ("raw", "encoded", "query"):
        url = FORMS[form](password)
        text = f"Traceback:\n  open(catalog={url!r})\nerror: cannot use {url}\n"
        harmless = FORMS[form](HARMLESS)
        assert_clean(mask_urls(text), password, mask_urls(f"Traceback:\n  open(catalog={harmless!r})\n"
                                                          f"error: cannot use {harmless}\n"))


@pytest.mark.parametrize("url, shown", [
    ("postgresql://alice:p@ss:TopSecretTail@127.0.0.1:5432/sdm", "postgresql://alice:***@127.0.0.1:5432/sdm"),
    ("postgresql://alice:p@ssTopSecretTail@127.0.0.1:1/sdm", "postgresql://alice:***@127.0.0.1:1/sdm"),
    ("postgresql://127.0.0.1:1/sdm?pass%77ord=TopSecretTail", "postgresql://127.0.0.1:1/sdm?pass%77ord=***"),
    ("postgresql://alice:a/b?c#d@h/db", "postgresql://alice:***@h/db"),
    ("postgresql://al@ice:pw@h/db", "postgresql://***@h/db"),  # which '@' ends the user name is ambiguous
    ("postgresql://alice@h/db?password=abc@Secret", "postgresql://***"),  # an '@' in the password hides the host
    ("postgresql://h/db?password=a&b&sslmode=disable", "postgresql://h/db?password=***&sslmode=disable"),
    ("postgresql://h/db?PassWord=a+b#c", "postgresql://h/db?PassWord=***"),
    ("postgresql://alice:a?password=b@h/db?x=1", "postgresql://alice:***"),  # the parameter runs to the end
    ("sqlite:////data/runs@2024/catalog.db", "sqlite:////data/runs@2024/catalog.db"),  # a file name, no password
    ("runs@2024/catalog.db", "runs@2024/catalog.db"),
])
def test_redact_url_on_raw_text(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact_url(shown) == shown  # masking twice changes nothing


@pytest.mark.parametrize("name", sorted(LEAKS))
def test_the_leaking_forms_are_masked_by_the_command(name: str) -> None:
    url, secret = LEAKS[name]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "SDM_CATALOG": ""}
    for args in (("ls",), ("show", "1", "--json"), ("find", "a=1")):
        out = subprocess.run([sys.executable, "-m", "sdm", *args, "--catalog", url], capture_output=True, text=True,
                             timeout=120, env=env)
        assert out.returncode == 1, out.stderr
        assert out.stdout == ""
        assert out.stderr.startswith(f"error: "), out.stderr
        assert secret not in out.stderr and "TopSecret" not in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
        if "@" in secret:
            assert "percent-encoded as %40" in out.stderr  # says what to do
            assert "cannot be used as written" in out.stderr
    assert "TopSecret" not in catalog_error(url)


def test_a_raw_at_sign_is_refused_before_any_connection() -> None:
    with pytest.raises(CatalogUnavailableError) as info:
        Catalog("postgresql://alice:p@ss@127.0.0.1:1/sdm")
    assert str(info.value) == (
        "catalog URL 'postgresql://alice:***@127.0.0.1:1/sdm' cannot be used as written: it holds more than one "
        "at sign, and connection libraries end the user name and password at the first; write an at sign in a "
        "password, a user name or a parameter percent-encoded as %40 (a colon as %3A, a slash as %2F, a question "
        "mark as %3F, a number sign as %23, a percent sign as %25, a space as %20)")
    with pytest.raises(CatalogUnavailableError, match=r"^catalog URL 'postgresql://alice:\*\*\*@127.0.0.1:port/sdm' "
                                                      r"cannot be used as written: it does not parse \("):
        Catalog("postgresql://alice:secret@127.0.0.1:port/sdm")


# ------------------------------------------------------------------------------ S3 credentials
@PROPERTY
@given(secret=PASSWORDS, key=st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=16, max_size=20))
def test_s3_credentials_never_shown(secret: str, key: str) -> None:
    from sdm.storage.backends.objectstore import ObjectStore, parse_url

    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
    os.environ.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret, AWS_SESSION_TOKEN=secret[::-1] + key)
    try:
        store = ObjectStore("s3://bucket/prefix", endpoint=f"http://127.0.0.1:{CLOSED}", retry_time=0,
                            connect_timeout=2, timeout=2)
        shown = [repr(store), repr(vars(store)), repr(store._credentials)]
        for call in (lambda: store.get_ranges("k", [(0, 4)]), lambda: store.start_upload("k"),
                     lambda: store.put("k", b"x")):
            with pytest.raises(StorageError) as info:
                call()
            shown.append(everything(info.value))
        endpoint = f"http://{key}:{quote(secret, safe='')}@127.0.0.1:{CLOSED}"
        shown.append(store._scrub(f"denied {key}/{secret} {quote(secret, safe='')} {secret[::-1] + key} "
                                  f"at {endpoint}"))
        for bad in (f"s3://{key}:{secret}@bucket/x", f"s3://{key}:{quote(secret, safe='')}@bucket/x"):
            with pytest.raises(InvalidArgumentError, match=r"^object store URL 's3://\*\*\*@") as bad_info:
                parse_url(bad)
            shown.append(everything(bad_info.value))
        for raw in (False, True):  # credentials in the endpoint are refused, not shown
            written = f"http://{key}:{secret if raw else quote(secret, safe='')}@127.0.0.1:{CLOSED}"
            with pytest.raises(InvalidArgumentError, match=r"^S3 endpoint 'http://\*\*\*@") as bad_info:
                ObjectStore("s3://bucket/prefix", endpoint=written)
            shown.append(everything(bad_info.value))
        text = "\n".join(shown)
        assert key not in text, text
        assert_clean(text, secret, repr(ObjectStore("s3://bucket/prefix", endpoint=f"http://127.0.0.1:{CLOSED}")))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
