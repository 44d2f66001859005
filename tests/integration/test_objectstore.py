"""ObjectStore against a real S3 server (versitygw) and, for faults, through toxiproxy."""

from __future__ import annotations

import errno
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from s3server import Proxy, S3Server
from secret_checks import assert_clean, everything
from sdm.errors import InvalidArgumentError, StorageError
from sdm.storage.backends.objectstore import ObjectStore, parse_url

BUCKET = "sdm-test"
MIB = 1024 * 1024


def _bytes(nbytes: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8).tobytes()


@pytest.fixture
def store(s3_server: S3Server) -> Iterator[ObjectStore]:
    """A store under a fresh prefix of bucket sdm-test, directly on the server."""
    created = ObjectStore(f"s3://{BUCKET}/t-{uuid.uuid4().hex[:8]}", endpoint=s3_server.endpoint)
    created.ensure_bucket()
    yield created


@pytest.fixture
def proxied(store: ObjectStore, toxiproxy: Proxy) -> ObjectStore:
    """The same prefix through toxiproxy, with short timeouts and a 2 s retry budget."""
    return ObjectStore(store.url, endpoint=toxiproxy.endpoint, timeout=1.0, connect_timeout=1.0,
                       retry_time=2.0, backoff=0.05, max_backoff=0.5)


def test_put_get_ranges_byte_identical(store: ObjectStore) -> None:
    data = _bytes(3 * MIB + 17, seed=1)
    store.put("arrays/a.bin", data)
    assert store.get("arrays/a.bin") == data
    assert store.get_range("arrays/a.bin", 12345, 4096) == data[12345:12345 + 4096]
    rng = np.random.default_rng(2)
    ranges = [(int(o), int(n)) for o, n in zip(rng.integers(0, len(data), 300), rng.integers(0, 70000, 300))]
    ranges += [(0, 0), (len(data) - 10, 10), (5, 1)]
    assert store.get_ranges("arrays/a.bin", ranges) == [data[o:o + n] for o, n in ranges]
    store.put("empty", b"")
    assert store.get("empty") == b"" and store.head("empty") == 0


def test_multipart_file_round_trip(store: ObjectStore, tmp_path: Path) -> None:
    data = _bytes(23 * MIB + 5, seed=3)  # five parts of 5 MiB
    (tmp_path / "in.bin").write_bytes(data)
    assert store.put_file("big.bin", tmp_path / "in.bin", part_size=5 * MIB) == len(data)
    assert store.head("big.bin") == len(data)
    assert store.get_file("big.bin", tmp_path / "out.bin") == len(data)
    assert (tmp_path / "out.bin").read_bytes() == data
    assert not (tmp_path / "out.bin.part").exists()
    assert store.get_ranges("big.bin", [(5 * MIB - 3, 6), (20 * MIB, MIB)]) == [
        data[5 * MIB - 3:5 * MIB + 3], data[20 * MIB:21 * MIB]]
    big = _bytes(11 * MIB, seed=4)  # put() of bytes above part_size is multipart too
    small_parts = ObjectStore(store.url, endpoint=store.endpoint, part_size=5 * MIB)
    small_parts.put("big2.bin", big)
    assert store.get("big2.bin") == big


def test_head_list_delete(store: ObjectStore) -> None:
    for key, size in (("a/1", 10), ("a/2", 20), ("a/b/3", 30), ("ab", 1)):
        store.put(key, bytes(size))
    assert store.list() == [("a/1", 10), ("a/2", 20), ("a/b/3", 30), ("ab", 1)]
    assert store.list("a") == [("a/1", 10), ("a/2", 20), ("a/b/3", 30)]
    assert store.head("a/2") == 20 and store.head("a/nope") is None
    store.delete("a/2")
    store.delete("a/2")  # deleting a missing object is no error
    assert store.head("a/2") is None
    assert store.list("a") == [("a/1", 10), ("a/b/3", 30)]


def test_missing_object_message(store: ObjectStore, tmp_path: Path) -> None:
    for call in (lambda: store.get("no/such"), lambda: store.get_range("no/such", 0, 10),
                 lambda: store.get_file("no/such", tmp_path / "x")):
        with pytest.raises(StorageError) as info:
            call()
        assert str(info.value) == f"GET {store.url}/no/such: no such object"
        assert info.value.errno == errno.ENOENT
    assert not list(tmp_path.iterdir())


def test_ensure_bucket_creates_once(s3_server: S3Server) -> None:
    name = f"sdm-new-{uuid.uuid4().hex[:8]}"
    fresh = ObjectStore(f"s3://{name}", endpoint=s3_server.endpoint)
    assert fresh.ensure_bucket() is True
    assert fresh.ensure_bucket() is False
    assert (s3_server.root / name).is_dir()
    fresh.put("k", b"v")
    assert (s3_server.root / name / "k").read_bytes() == b"v"


def test_bad_urls_and_keys() -> None:
    assert parse_url("s3://my-bucket/a/b/") == ("my-bucket", "a/b")
    for url in ("http://b/x", "s3://", "s3://B_ad/x", "s3://b/x?q=1"):
        with pytest.raises(InvalidArgumentError):
            parse_url(url)
    with pytest.raises(InvalidArgumentError, match="non-empty relative key"):
        ObjectStore("s3://sdm-test").get("/abs")


def test_credentials_never_in_messages(s3_server: S3Server, store: ObjectStore,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-" + s3_server.secret_key)
    bad = ObjectStore(store.url, endpoint=s3_server.endpoint)
    with pytest.raises(StorageError) as info:
        bad.put("x", b"1")
    assert str(info.value) == f"PUT {store.url}/x failed: HTTP 403 SignatureDoesNotMatch"
    assert s3_server.secret_key not in str(info.value) and s3_server.access_key not in str(info.value)
    assert s3_server.secret_key not in repr(bad) + repr(bad._credentials)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_PROFILE", "nobody")
    with pytest.raises(StorageError, match="^no S3 credentials: set AWS_ACCESS_KEY_ID"):
        ObjectStore(store.url, endpoint=s3_server.endpoint)


@pytest.mark.parametrize("secret", ["Zeb7@Quo8:Vix9/Wam6?Yod5#Kel4%40Hup3 Tir2'Sag1\"Nox0\\Ruf8&Pim7=Lak6+Gos5",
                                    "%2F%40%3A", "a b+c"])
def test_hostile_credentials_never_shown(s3_server: S3Server, store: ObjectStore, monkeypatch: pytest.MonkeyPatch,
                                         secret: str) -> None:
    """Keys holding every character that breaks URL parsers: the server refuses them, nothing shows them."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", secret[::-1] + "-token")
    bad = ObjectStore(store.url, endpoint=s3_server.endpoint, retry_time=0)
    shown = [repr(bad), repr(vars(bad)), repr(bad._credentials)]
    for call in (lambda: bad.put("x", b"1"), lambda: bad.get("x"), lambda: bad.start_upload("x"),
                 lambda: bad.list("")):
        with pytest.raises(StorageError) as info:
            call()
        assert re.search(r"failed: HTTP 40[03]", str(info.value)), str(info.value)
        shown.append(everything(info.value))
    for where in (f"http://{s3_server.access_key}:{secret}@127.0.0.1:1", f"s3://{s3_server.access_key}:{secret}@b/x"):
        with pytest.raises(InvalidArgumentError, match="carries credentials") as refused:
            ObjectStore(where, endpoint=s3_server.endpoint) if where.startswith("s3") else \
                ObjectStore(store.url, endpoint=where)
        shown.append(everything(refused.value))
    text = "\n".join(shown)
    assert_clean(text, secret)
    assert_clean(text, secret[::-1] + "-token")
    assert s3_server.access_key not in "\n".join(shown[-2:])  # not even the key id, written into a URL


def test_credentials_from_shared_file(s3_server: S3Server, store: ObjectStore, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "credentials").write_text(
        f"[sdm]\naws_access_key_id = {s3_server.access_key}\naws_secret_access_key = {s3_server.secret_key}\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_PROFILE", "sdm")
    ObjectStore(store.url, endpoint=s3_server.endpoint).put("from-file", b"ok")
    assert store.get("from-file") == b"ok"


def test_latency_works_slower(store: ObjectStore, proxied: ObjectStore, toxiproxy: Proxy) -> None:
    data = _bytes(MIB, seed=5)
    store.put("lat", data)
    with toxiproxy.toxic("latency", latency=300):
        start = time.monotonic()
        assert proxied.get_ranges("lat", [(0, 4096), (MIB - 4096, 4096)]) == [data[:4096], data[-4096:]]
        assert proxied.get("lat") == data
        proxied.put("lat2", data)
        elapsed = time.monotonic() - start
    assert elapsed >= 0.9  # three requests, each answered 300 ms late
    assert store.get("lat2") == data


@pytest.mark.parametrize("kind, cause", [("reset_peer", "connection reset by the server"),
                                         ("timeout", "timed out")])
def test_faults_retry_then_fail_naming_the_object(kind: str, cause: str, s3_server: S3Server,
                                                  store: ObjectStore, proxied: ObjectStore,
                                                  toxiproxy: Proxy) -> None:
    before = {f"k{i}": _bytes(100_000 + i, seed=10 + i) for i in range(3)}
    for key, value in before.items():
        proxied.put(key, value)
    failing = re.compile(rf"^(GET|PUT|HEAD|LIST) {re.escape(store.url)}(/\S+)? failed after (\d+) attempts "
                         rf"in [\d.]+ s: {cause}$")
    with toxiproxy.toxic(kind, timeout=0):
        for call in (lambda: proxied.get("k0"), lambda: proxied.get_ranges("k1", [(0, 10), (50_000, 10)]),
                     lambda: proxied.put("k9", b"new"), lambda: proxied.head("k2"), lambda: proxied.list()):
            start = time.monotonic()
            with pytest.raises(StorageError) as info:
                call()
            elapsed = time.monotonic() - start
            message = str(info.value)
            match = failing.match(message)
            assert match, message
            assert int(match.group(3)) >= 2  # retried
            assert elapsed < proxied.retry_time + proxied.timeout + 1.5, (message, elapsed)
            assert s3_server.secret_key not in message and s3_server.access_key not in message
        assert str(pytest.raises(StorageError, proxied.get, "k0").value).startswith(f"GET {store.url}/k0 failed")
    # toxic removed: the same calls work and nothing was lost
    assert {key: proxied.get(key) for key in before} == before
    assert proxied.get_ranges("k1", [(0, 10), (50_000, 10)]) == [before["k1"][:10], before["k1"][50_000:50_010]]
    proxied.put("k9", b"new")
    assert proxied.get("k9") == b"new"
    assert [key for key, _ in proxied.list()] == ["k0", "k1", "k2", "k9"]
