"""A real, throwaway S3 server (versitygw) and a fault injector (toxiproxy) for tests and benchmarks.

No mocks: this starts the ``versitygw`` gateway with its POSIX backend in a temporary
directory, and the ``toxiproxy`` server, both on free ports of 127.0.0.1 only.

Binaries: built with ``go install`` into ``<repo>/.tools/bin`` (``$SDM_TOOLS_BIN``
overrides; ``make tools``, which ``make test`` depends on, runs ``s3server.py install``)::

    GOBIN=.tools/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
    GOBIN=.tools/bin go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0   # -> .tools/bin/server

Used two ways:

* as a module, by ``tests/conftest.py`` (fixtures ``s3_server``, ``toxiproxy``) and by the
  benchmarks (``sys.path.insert(0, "tests/integration")``)::

      with S3Server() as s3, Toxiproxy() as tp:
          s3.env()                     # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL
          proxy = tp.proxy("s3", s3.address)
          proxy.endpoint               # http://127.0.0.1:PORT, in front of the gateway
          with proxy.toxic("latency", latency=20):
              ...                      # every response 20 ms late

* as a command line tool: ``python tests/integration/s3server.py install`` (binaries only).

The root credentials are generated per server (random), handed to the gateway through its
environment (never on a command line, where ``ps`` would show them) and to clients through
the standard AWS variables (:meth:`S3Server.env`). A watcher process stops the servers
once the process that started them is gone (a killed test run); no signal handler is
installed. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pgserver beside it, also when run as a script
from pgserver import _pid_alive, free_port  # noqa: E402 - the same port and process helpers

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_BIN = Path(os.environ.get("SDM_TOOLS_BIN", REPO_ROOT / ".tools" / "bin"))
TOOLS = {  # binary name in TOOLS_BIN -> Go package@version
    "versitygw": "github.com/versity/versitygw/cmd/versitygw@v1.8.0",
    "server": "github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0",  # the toxiproxy server
}
GO_CANDIDATES = ("/usr/local/go/bin/go",)
TMP_PREFIX = "sdm-s3-"
REGION = "us-east-1"
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION")


class S3ServerError(RuntimeError):
    """A test server could not be installed, started or used."""


# --------------------------------------------------------------------------- binaries


def find_go() -> str | None:
    """The ``go`` command: ``$GO``, ``go`` on PATH, or /usr/local/go/bin/go."""
    for candidate in (os.environ.get("GO"), shutil.which("go"), *GO_CANDIDATES):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def install_tools() -> dict[str, Path]:
    """Return ``{name: path}`` of the binaries, building the missing ones with ``go install``."""
    paths = {name: TOOLS_BIN / name for name in TOOLS}
    missing = [name for name, path in paths.items() if not os.access(path, os.X_OK)]
    if not missing:
        return paths
    go = find_go()
    if go is None:
        raise S3ServerError(f"{', '.join(missing)} not found in {TOOLS_BIN} and no Go toolchain to build "
                            "them (install Go, set $GO, or run `make tools` where Go exists)")
    TOOLS_BIN.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(TOOLS_BIN)}
    for name in missing:
        print(f"s3server: building {TOOLS[name]} into {TOOLS_BIN}", file=sys.stderr, flush=True)
        result = subprocess.run([go, "install", TOOLS[name]], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0 or not os.access(paths[name], os.X_OK):
            raise S3ServerError(f"go install {TOOLS[name]} failed (exit {result.returncode}):\n"
                                f"{result.stdout[-4000:]}")
    return paths


# --------------------------------------------------------------------------- processes


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> bool:
    """Wait until *url* answers HTTP (any status) while *proc* lives; False if it died or timed out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # an answer (403 for an unsigned S3 request)
        except OSError:
            time.sleep(0.05)
    return False


def _kill(pid: int) -> None:
    """SIGTERM, then SIGKILL after 2 s (test data only: no need to wait for open connections)."""
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    for _ in range(40):
        if not _pid_alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def watch(owner: int, workdir: Path, pid: int, poll: float = 0.5) -> None:
    """Wait while *owner* lives and *workdir* exists; then kill *pid* and remove *workdir*."""
    while workdir.exists() and _pid_alive(owner):
        time.sleep(poll)
    if workdir.exists():
        _kill(pid)
        shutil.rmtree(workdir, ignore_errors=True)


class _Process:
    """One server process in its own temporary directory, watched, stopped by :meth:`stop`."""

    name = "server"
    binary = ""

    def __init__(self) -> None:
        self.workdir: Path | None = None
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``."""
        if self.port is None:
            raise S3ServerError(f"the test {self.name} is not started")
        return f"127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.address}"

    def _command(self, binary: Path, port: int) -> list[str]:
        raise NotImplementedError

    def _env(self) -> dict[str, str]:
        return dict(os.environ)

    def start(self, *, attempts: int = 5) -> str:
        """Start the server (a no-op when running); return its endpoint."""
        if self.proc is not None:
            return self.endpoint
        binary = install_tools()[self.binary]
        self.workdir = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        try:
            for _ in range(attempts):
                port = free_port()
                log = open(self.workdir / "server.log", "wb")  # noqa: SIM115 (kept by the process)
                with log:
                    proc = subprocess.Popen(self._command(binary, port), cwd=self.workdir, env=self._env(),
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
                if _wait_http(f"http://127.0.0.1:{port}/", proc):
                    self.proc, self.port = proc, port
                    break
                _kill(proc.pid)
                proc.wait()
            else:
                raise S3ServerError(f"the {self.name} did not start after {attempts} ports tried; "
                                    f"log:\n{self._log_tail()}")
            subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "watch", str(os.getpid()),
                              str(self.workdir), str(self.proc.pid)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        except BaseException:
            self.stop()
            raise
        return self.endpoint

    def _log_tail(self, chars: int = 4000) -> str:
        try:
            return (self.workdir / "server.log").read_text(errors="replace")[-chars:]  # type: ignore[operator]
        except OSError:
            return "(no server log)"

    def stop(self) -> None:
        """Stop the server and remove its directory; safe to call twice or after a failed start."""
        proc, workdir = self.proc, self.workdir
        self.proc, self.workdir, self.port = None, None, None
        if proc is not None:
            _kill(proc.pid)
            proc.wait()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)  # the watcher then exits

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- versitygw


class S3Server(_Process):
    """versitygw on 127.0.0.1 with a POSIX backend in a temporary directory and random root credentials."""

    name = "S3 server (versitygw)"
    binary = "versitygw"

    def __init__(self) -> None:
        super().__init__()
        self.access_key = "sdm" + secrets.token_hex(8)
        self.secret_key = secrets.token_urlsafe(30)
        self.region = REGION

    @property
    def root(self) -> Path:
        """The backend directory: one subdirectory per bucket."""
        if self.workdir is None:
            raise S3ServerError(f"the test {self.name} is not started")
        return self.workdir / "data"

    def _command(self, binary: Path, port: int) -> list[str]:
        (self.workdir / "data").mkdir(exist_ok=True)  # type: ignore[operator]
        return [str(binary), "--port", f"127.0.0.1:{port}", "--keep-alive", "--quiet", "posix",
                str(self.workdir / "data")]  # type: ignore[operator]

    def _env(self) -> dict[str, str]:
        return {**os.environ, "ROOT_ACCESS_KEY_ID": self.access_key, "ROOT_SECRET_ACCESS_KEY": self.secret_key,
                "VGW_REGION": self.region}

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """The standard AWS variables for a client of this server (or of *endpoint*, a proxy in front of it)."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
                "AWS_ENDPOINT_URL": endpoint or self.endpoint}


# --------------------------------------------------------------------------- toxiproxy


class Toxiproxy(_Process):
    """The toxiproxy server on 127.0.0.1; :meth:`proxy` puts a proxy in front of an address."""

    name = "toxiproxy server"
    binary = "server"

    def _command(self, binary: Path, port: int) -> list[str]:
        return [str(binary), "-host", "127.0.0.1", "-port", str(port)]

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Call toxiproxy's HTTP API; return the decoded JSON answer (None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.endpoint + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            raise S3ServerError(f"toxiproxy {method} {path}: HTTP {exc.code} {exc.read()[:500]!r}") from None
        return json.loads(text) if text.strip() else None

    def proxy(self, name: str, upstream: str) -> Proxy:
        """A (new or replaced) proxy called *name* on a free port of 127.0.0.1 forwarding to *upstream*."""
        with contextlib.suppress(S3ServerError):
            self.api("DELETE", f"/proxies/{name}")
        for _ in range(5):
            listen = f"127.0.0.1:{free_port()}"
            with contextlib.suppress(S3ServerError):
                self.api("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": True})
                return Proxy(self, name, listen)
        raise S3ServerError(f"toxiproxy could not listen for proxy {name!r}")


class Proxy:
    """One toxiproxy proxy: its client endpoint and its toxics."""

    def __init__(self, server: Toxiproxy, name: str, listen: str) -> None:
        self.server = server
        self.name = name
        self.listen = listen

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: clients connect here instead of the upstream."""
        return f"http://{self.listen}"

    def add_toxic(self, kind: str, *, name: str | None = None, stream: str = "downstream",
                  toxicity: float = 1.0, **attributes: Any) -> str:
        """Add a toxic (``latency`` latency=ms jitter=ms, ``reset_peer`` timeout=ms, ``timeout`` timeout=ms, ...).

        Returns its name (``KIND_STREAM`` unless given).
        """
        name = name or f"{kind}_{stream}"
        self.server.api("POST", f"/proxies/{self.name}/toxics",
                        {"name": name, "type": kind, "stream": stream, "toxicity": toxicity,
                         "attributes": attributes})
        return name

    def remove_toxic(self, name: str) -> None:
        """Remove the toxic called *name*."""
        self.server.api("DELETE", f"/proxies/{self.name}/toxics/{name}")

    def toxics(self) -> list[dict[str, Any]]:
        """The toxics in place."""
        return list(self.server.api("GET", f"/proxies/{self.name}/toxics") or [])

    def clear(self) -> None:
        """Remove every toxic."""
        for toxic in self.toxics():
            self.remove_toxic(toxic["name"])

    @contextlib.contextmanager
    def toxic(self, kind: str, **kwargs: Any) -> Iterator[str]:
        """:meth:`add_toxic` for the duration of a ``with`` block."""
        name = self.add_toxic(kind, **kwargs)
        try:
            yield name
        finally:
            self.remove_toxic(name)


# --------------------------------------------------------------------------- CLI


def serve(envfile: Path) -> int:
    """Run an S3 server until interrupted (Ctrl-C or SIGTERM's default action), for demos and by hand.

    The clients' variables go to *envfile* (readable by its owner only), never to the terminal.
    """
    with S3Server() as server:
        envfile.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(envfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.writelines(f"export {k}='{v}'\n" for k, v in server.env().items())
        print(f"s3server: versitygw at {server.endpoint} (data in {server.root}, removed at exit); "
              f"`. {envfile}` sets the AWS variables", flush=True)
        try:
            assert server.proc is not None
            server.proc.wait()
        except KeyboardInterrupt:
            pass
        finally:
            envfile.unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["install", "serve", "watch"],
                        help="install: build versitygw and toxiproxy into .tools/bin if missing; "
                             "serve [ENVFILE]: run a versitygw on 127.0.0.1 until interrupted, its AWS variables "
                             "written to ENVFILE (default .tools/s3.env, mode 600) for `. ENVFILE`; "
                             "watch OWNER WORKDIR PID: kill PID once OWNER is gone (started by start())")
    parser.add_argument("watched", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.command == "watch":
        watch(int(args.watched[0]), Path(args.watched[1]), int(args.watched[2]))
        return 0
    if args.command == "serve":
        return serve(Path(args.watched[0]) if args.watched else TOOLS_BIN.parent / "s3.env")
    try:
        paths = install_tools()
    except S3ServerError as exc:
        print(f"s3server: {exc}", file=sys.stderr)
        return 1
    print("s3server: " + ", ".join(f"{name}: {path}" for name, path in paths.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
