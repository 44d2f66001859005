"""A real, throwaway PostgreSQL server for SDM's tests.

No mocks: this starts Debian's own ``postgres`` binary on a free port of 127.0.0.1,
with trust authentication, in a temporary data directory that is removed on stop.

Used two ways:

* as a module, by ``tests/conftest.py`` (fixtures ``postgres_server`` and ``catalog_url``)::

      server = PgServer()
      server.start()
      with server.fresh_database() as url:   # a new, uniquely named database
          ...                                # url = postgresql://sdmtest@127.0.0.1:PORT/sdm_t_...
      server.stop()

* as a command line tool (state kept in ``<repo>/.pg/server.json``)::

      python tests/integration/pgserver.py install   # binaries + test user, nothing started
      python tests/integration/pgserver.py start     # prints the URL of database sdm_test
      python tests/integration/pgserver.py url
      python tests/integration/pgserver.py stop

What it does, in order:

1. finds the server binaries (``/usr/lib/postgresql/*/bin/{initdb,pg_ctl,postgres}``, newest
   version first; ``$SDM_PG_BINDIR`` overrides); if absent and we are root, runs
   ``apt-get update && apt-get install -y postgresql`` (``DEBIAN_FRONTEND=noninteractive``);
2. ``initdb`` refuses to run as root, so when we are root it creates (once) an unprivileged
   system user ``sdmtest`` (``$SDM_PG_USER``) with ``useradd`` and runs ``initdb``/``pg_ctl``
   as that user; otherwise it runs them as the current user;
3. ``initdb`` into ``$TMPDIR/sdm-pg-XXXX/data`` (owned by that user), trust authentication,
   then ``pg_ctl start`` listening on 127.0.0.1 only (``listen_addresses``), on a free port,
   Unix socket inside the temporary directory, durability switched off (test data only);
4. creates database ``sdm_test``.

A server whose starting process died without stopping it (a killed test run) is stopped
and removed by the next :meth:`PgServer.start` (see :func:`reap_stale_servers`).

Only the standard library is used here, so the CLI runs under any Python >= 3.11;
databases are created and dropped with the ``psql`` client that comes with the server.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

TEST_USER = os.environ.get("SDM_PG_USER", "sdmtest")
DEFAULT_DB = "sdm_test"
SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
CLIENT_BINARY = "psql"
TMP_PREFIX = "sdm-pg-"
OWNER_FILE = "owner.json"
REPO_ROOT = Path(__file__).resolve().parents[2]
CLI_STATE = Path(os.environ.get("SDM_PG_STATE", REPO_ROOT / ".pg" / "server.json"))

# Settings appended to postgresql.conf. Durability is off: this is test data.
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "64MB",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] %d '",
}


class PgServerError(RuntimeError):
    """The test PostgreSQL server could not be installed, started or used."""


# --------------------------------------------------------------------------- binaries


def _version_key(bindir: str) -> tuple[int, ...]:
    match = re.search(r"/postgresql/([\d.]+)/bin$", bindir)
    return tuple(int(p) for p in match.group(1).split(".")) if match else (0,)


def find_bindir() -> Path | None:
    """Return the directory holding initdb, pg_ctl and postgres, or None if not installed."""
    override = os.environ.get("SDM_PG_BINDIR")
    if override:
        candidates = [override]
    else:
        candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
        on_path = shutil.which("pg_ctl")
        if on_path:  # non-Debian systems put the server binaries on PATH
            candidates.append(str(Path(on_path).resolve().parent))
    for candidate in candidates:
        path = Path(candidate)
        if all(os.access(path / name, os.X_OK) for name in (*SERVER_BINARIES, CLIENT_BINARY)):
            return path
    return None


def install_server() -> Path:
    """Return the server binary directory, installing Debian's ``postgresql`` if needed."""
    bindir = find_bindir()
    if bindir is not None:
        return bindir
    if os.environ.get("SDM_PG_BINDIR"):
        raise PgServerError(f"SDM_PG_BINDIR={os.environ['SDM_PG_BINDIR']} does not hold "
                            f"{', '.join((*SERVER_BINARIES, CLIENT_BINARY))}")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PgServerError(
            "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found in "
            "/usr/lib/postgresql/*/bin and cannot be installed automatically (needs root and "
            "apt-get). Install the 'postgresql' package, or set SDM_PG_BINDIR to the directory "
            "holding them."
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print("pgserver: PostgreSQL server not found; installing Debian package 'postgresql'",
          file=sys.stderr, flush=True)
    for cmd in (["apt-get", "update"],
                ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"]):
        result = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise PgServerError(f"{' '.join(cmd)} failed (exit {result.returncode}):\n"
                                f"{result.stdout[-4000:]}")
    bindir = find_bindir()
    if bindir is None:
        raise PgServerError("installed package 'postgresql' but still found no server "
                            "binaries in /usr/lib/postgresql/*/bin")
    return bindir


# --------------------------------------------------------------------------- the user


def server_user() -> str:
    """Name of the user that owns and runs the server (created if we are root)."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        result = subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home",
             "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
             "--comment", "SDM test PostgreSQL", TEST_USER],
            stdin=subprocess.DEVNULL, capture_output=True, text=True)
        try:
            pwd.getpwnam(TEST_USER)  # a concurrent run may have created it first
        except KeyError:
            raise PgServerError(
                f"could not create system user {TEST_USER!r} to run PostgreSQL "
                f"(initdb refuses root): {result.stderr.strip()}") from None
    return TEST_USER


def _as_user(user: str) -> dict:
    """subprocess keyword arguments that run a command as ``user`` (when we are root)."""
    if os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _clean_env() -> dict[str, str]:
    """Our environment without PG* variables (PGHOST, PGPORT, ...) that would redirect tools."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------- the server


class PgServer:
    """One PostgreSQL server in a temporary directory, listening on 127.0.0.1 only.

    Parameters
    ----------
    persistent
        True for a server that outlives the process starting it (the CLI); such a server is
        never reaped as stale.
    """

    def __init__(self, *, persistent: bool = False) -> None:
        self.persistent = persistent
        self.bindir: Path | None = None
        self.user: str | None = None
        self.workdir: Path | None = None
        self.port: int | None = None

    # -- paths and URLs

    @property
    def datadir(self) -> Path:
        return self._require("workdir") / "data"

    @property
    def logfile(self) -> Path:
        return self._require("workdir") / "server.log"

    @property
    def url(self) -> str:
        """URL of the default database ``sdm_test``."""
        return self.url_for(DEFAULT_DB)

    def url_for(self, dbname: str) -> str:
        return f"postgresql://{self._require('user')}@127.0.0.1:{self._require('port')}/{dbname}"

    def _require(self, attr: str):
        value = getattr(self, attr)
        if value is None:
            raise PgServerError("the test PostgreSQL server is not started")
        return value

    @property
    def running(self) -> bool:
        return self.workdir is not None and self.port is not None

    # -- life cycle

    def start(self, *, attempts: int = 5) -> str:
        """Install if needed, initdb, start; return the URL of database ``sdm_test``."""
        if self.running:
            return self.url
        reap_stale_servers()
        self.bindir = install_server()
        self.user = server_user()
        self.workdir = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        try:
            (self.workdir / OWNER_FILE).write_text(json.dumps(
                {"pid": None if self.persistent else os.getpid(), "bindir": str(self.bindir)}))
            (self.workdir / "sock").mkdir()
            if os.geteuid() == 0:  # the server runs as the unprivileged user
                entry = pwd.getpwnam(self.user)
                for path in (self.workdir, self.workdir / "sock"):
                    os.chown(path, entry.pw_uid, entry.pw_gid)
            self._run_as_server(
                [self.bindir / "initdb", "-D", self.datadir, "-U", self.user,
                 "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync",
                 "--no-instructions"], what="initdb")
            for attempt in range(attempts):
                self.port = free_port()
                if self._pg_ctl_start():
                    break
                log = self._log_tail()
                self.port = None
                if "could not bind" not in log and "already in use" not in log:
                    raise PgServerError(f"PostgreSQL did not start; server log:\n{log}")
            else:
                raise PgServerError(f"PostgreSQL did not start after {attempts} ports tried; "
                                    f"server log:\n{self._log_tail()}")
            self.create_database(DEFAULT_DB)
            if not self.persistent:
                self._watch()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _watch(self) -> None:
        """Start a watcher that stops this server once the process that started it is gone.

        It runs in its own session, so a test run killed by ``timeout`` (SIGTERM, then
        SIGKILL) still leaves no server behind, and no signal handler is needed.
        """
        subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "watch", str(os.getpid()),
                          str(self.workdir)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, env=_clean_env())

    def _pg_ctl_start(self) -> bool:
        conf = self.datadir / "postgresql.conf"
        settings = {**SERVER_SETTINGS, "port": str(self.port),
                    "unix_socket_directories": f"'{self.workdir / 'sock'}'"}
        with conf.open("a") as fh:  # later lines win, so retries simply append
            fh.write("\n# sdm test settings\n")
            fh.writelines(f"{key} = {value}\n" for key, value in settings.items())
        result = subprocess.run(
            [self.bindir / "pg_ctl", "start", "-D", self.datadir, "-l", self.logfile,
             "-w", "-t", "60"],
            cwd=self.workdir, env=_clean_env(), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, **_as_user(self.user))
        return result.returncode == 0

    def stop(self) -> None:
        """Stop the server and remove its directory; safe to call twice or after a failed start."""
        workdir, self.workdir, self.port = self.workdir, None, None
        if workdir is not None:
            _stop_and_remove(workdir, self.bindir, self.user)

    def __enter__(self) -> PgServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- databases

    def psql(self, sql: str, *, dbname: str = "postgres") -> str:
        """Run SQL with ``psql`` as the server's superuser; return its unaligned output."""
        result = subprocess.run(
            [self._require("bindir") / CLIENT_BINARY, "-X", "-q", "-A", "-t",
             "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(self._require("port")),
             "-U", self._require("user"), "-d", dbname, "-c", sql],
            env=_clean_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=120)
        if result.returncode != 0:
            raise PgServerError(f"psql failed on {sql!r}: {result.stderr.strip()}")
        return result.stdout.strip()

    def create_database(self, name: str | None = None, *, prefix: str = "sdm_t") -> str:
        """Create a database (a new unique name when ``name`` is None); return its name."""
        if name is None:
            name = f"{prefix}_{uuid.uuid4().hex[:16]}"
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
            raise PgServerError(f"database name {name!r} must be a lower-case SQL identifier")
        self.psql(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting any session still using it."""
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextlib.contextmanager
    def fresh_database(self, *, prefix: str = "sdm_t") -> Iterator[str]:
        """Context manager: a new uniquely named database's URL; dropped on exit."""
        name = self.create_database(prefix=prefix)
        try:
            yield self.url_for(name)
        finally:
            if self.running:
                self.drop_database(name)

    # -- helpers

    def _run_as_server(self, cmd: list, *, what: str) -> None:
        result = subprocess.run(cmd, cwd=self.workdir, env=_clean_env(),
                                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                **_as_user(self.user))
        if result.returncode != 0:
            raise PgServerError(f"{what} failed (exit {result.returncode}):\n"
                                f"{result.stdout}{result.stderr}")

    def _log_tail(self, chars: int = 4000) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no server log)"

    # -- CLI state

    def to_state(self) -> dict:
        return {"bindir": str(self.bindir), "user": self.user,
                "workdir": str(self.workdir), "port": self.port}

    @classmethod
    def from_state(cls, state: dict) -> PgServer:
        server = cls(persistent=True)
        server.bindir = Path(state["bindir"])
        server.user = state["user"]
        server.workdir = Path(state["workdir"])
        server.port = int(state["port"])
        return server


def _postmaster_pid(datadir: Path) -> int | None:
    try:
        return int((datadir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _stop_and_remove(workdir: Path, bindir: Path | None, user: str | None) -> None:
    """Stop the server in ``workdir`` (fast, then immediate, then SIGKILL) and delete it."""
    datadir = workdir / "data"
    if (datadir / "postmaster.pid").exists():
        if bindir is None:
            with contextlib.suppress(OSError, ValueError, KeyError):
                bindir = Path(json.loads((workdir / OWNER_FILE).read_text())["bindir"])
        kwargs = _as_user(user) if user else {}
        for mode in ("fast", "immediate"):
            if bindir is None:
                break
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                result = subprocess.run(
                    [bindir / "pg_ctl", "stop", "-D", datadir, "-m", mode, "-w", "-t", "30"],
                    cwd="/", env=_clean_env(), stdin=subprocess.DEVNULL,
                    capture_output=True, timeout=60, **kwargs)
                if result.returncode == 0:
                    break
        pid = _postmaster_pid(datadir)
        if pid is not None and _pid_alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            for _ in range(100):
                if not _pid_alive(pid):
                    break
                time.sleep(0.05)
    shutil.rmtree(workdir, ignore_errors=True)


def watch(owner: int, workdir: Path, poll: float = 0.5) -> None:
    """Wait while *owner* lives and *workdir* exists; then stop and remove the server left in it."""
    while workdir.exists() and _pid_alive(owner):
        time.sleep(poll)
    if workdir.exists():
        try:
            user = pwd.getpwuid((workdir / "data").stat().st_uid).pw_name
        except (OSError, KeyError):
            user = None
        _stop_and_remove(workdir, None, user)


def reap_stale_servers() -> list[Path]:
    """Stop and remove test servers whose starting process is gone (killed test runs)."""
    reaped = []
    for path in glob.glob(os.path.join(tempfile.gettempdir(), TMP_PREFIX + "*")):
        workdir = Path(path)
        try:
            owner = json.loads((workdir / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        pid = owner.get("pid")
        if pid is None or _pid_alive(pid):
            continue  # persistent (CLI) server, or its owner is still running
        try:
            user = pwd.getpwuid((workdir / "data").stat().st_uid).pw_name
        except (OSError, KeyError):
            user = None
        _stop_and_remove(workdir, None, user)
        reaped.append(workdir)
    return reaped


# --------------------------------------------------------------------------- CLI


def _load_cli_server() -> PgServer | None:
    try:
        server = PgServer.from_state(json.loads(CLI_STATE.read_text()))
    except (OSError, ValueError, KeyError):
        return None
    pid = _postmaster_pid(server.datadir)
    if pid is None or not _pid_alive(pid):
        _stop_and_remove(server.workdir, server.bindir, server.user)
        CLI_STATE.unlink(missing_ok=True)
        return None
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["install", "start", "stop", "url", "status", "watch"],
                        help="install: server binaries and test user only; start: start (or "
                             "reuse) the server and print its URL; url: print the URL; stop; "
                             "status; watch PID WORKDIR: stop that server once PID is gone "
                             "(started by the tests)")
    parser.add_argument("watched", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.command == "watch":
        watch(int(args.watched[0]), Path(args.watched[1]))
        return 0
    try:
        if args.command == "install":
            bindir = install_server()
            print(f"PostgreSQL server binaries: {bindir}; runs as user {server_user()}")
            return 0
        server = _load_cli_server()
        if args.command == "start":
            if server is None:
                server = PgServer(persistent=True)
                server.start()
                CLI_STATE.parent.mkdir(parents=True, exist_ok=True)
                CLI_STATE.write_text(json.dumps(server.to_state()))
            print(server.url)
        elif args.command == "url" or args.command == "status":
            if server is None:
                print("pgserver: not running (start it with: pgserver.py start)", file=sys.stderr)
                return 1
            print(server.url if args.command == "url"
                  else f"running: {server.url} (data in {server.workdir})")
        elif args.command == "stop":
            if server is not None:
                server.stop()
            CLI_STATE.unlink(missing_ok=True)
        return 0
    except PgServerError as exc:
        print(f"pgserver: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
