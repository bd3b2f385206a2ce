"""Start and stop real PostgreSQL servers on 127.0.0.1 for the tests.

`shared_postgres_url()` gives the server every PostgreSQL test may use: the one
named by ``CONVMEM_POSTGRES_URL`` (CI starts it), else one started here once per
test process from Debian's binaries (``initdb`` on the path or under
``/usr/lib/postgresql/*/bin``), in a temporary folder, as the ``postgres`` user
when the tests run as root. Tests that kill, stop or freeze the server start
their own `PostgresServer`. Each test works in its own schema, dropped at the end.

Without the binaries the tests skip, unless ``CONVMEM_REQUIRE_SERVERS=1`` (CI),
which turns the skip into a failure.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from redis_server import free_port, skip_or_fail

__all__ = [
    "PostgresServer",
    "PostgresUnavailable",
    "drop_schema",
    "new_schema",
    "postgres_url",
    "private_postgres",
    "shared_postgres_url",
]

URL_VARIABLE = "CONVMEM_POSTGRES_URL"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server can be used: the reason says why."""


def binaries() -> Path | None:
    """The folder with initdb and postgres: the path first, then the newest Debian version."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def new_schema() -> str:
    return f"convmem_test_{uuid.uuid4().hex[:16]}"


def drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class PostgresServer:
    """One PostgreSQL cluster (data folder) and its server, on 127.0.0.1 and a free port.

    `kill` (SIGKILL, like a crash) and `freeze` (SIGSTOP: a server that accepts
    connections but never answers) reach the postmaster and every backend. Durability settings are
    relaxed for speed (``fsync=off``): a killed server still keeps every
    committed write, since the operating system keeps the files.
    """

    def __init__(self, *, port: int | None = None) -> None:
        folder = binaries()
        if folder is None:
            raise PostgresUnavailable(
                "PostgreSQL is not installed (Debian: apt-get install postgresql); "
                f"or set {URL_VARIABLE} to a running server"
            )
        self.bin = folder
        self.port = port or free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="convmem-postgres-"))
        self.data = self.folder / "data"
        # initdb refuses to run as root: the server runs as the postgres user then.
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            shutil.chown(self.folder, self.user, self.user)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run_as_owner(self, args: list[str]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(args, user=self.user, capture_output=True, check=False, timeout=120)

    def start(self, timeout: float = 60.0) -> PostgresServer:
        if not (self.data / "PG_VERSION").exists():
            done = self._run_as_owner(
                [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                 "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]
            )  # fmt: skip
            if done.returncode != 0:
                raise PostgresUnavailable(f"initdb failed: {done.stderr.decode(errors='replace')[-2000:]}")
        log = open(self.folder / "server.log", "ab")  # noqa: SIM115 - the child keeps it
        self.process = subprocess.Popen(
            [
                str(self.bin / "postgres"), "-D", str(self.data),
                "-p", str(self.port),
                "-c", "listen_addresses=127.0.0.1",
                "-c", f"unix_socket_directories={self.folder}",
                "-c", "max_connections=300",
                "-c", "fsync=off",
                "-c", "full_page_writes=off",
                "-c", "shared_buffers=64MB",
            ],
            user=self.user,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PostgresUnavailable(f"postgres exited at start-up: {self._log_tail()}")
            if self.ready():
                return self
            time.sleep(0.05)
        self.kill()
        raise PostgresUnavailable(f"postgres did not answer on port {self.port} within {timeout} s")

    def ready(self) -> bool:
        try:
            with psycopg.connect(self.url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def _processes(self) -> list[int]:
        """The postmaster and its children. Backends call setsid(), so no process group holds them all."""
        if self.process is None:
            return []
        postmaster = self.process.pid
        found = [postmaster]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                # pid (comm) state ppid ...: the comm may hold spaces, so split after its ')'.
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == postmaster:
                found.append(int(stat.parent.name))
        return found

    def _signal_group(self, sig: signal.Signals) -> None:
        for pid in self._processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL to the postmaster and every backend: a crash, no shutdown."""
        self.thaw()
        self._signal_group(signal.SIGKILL)
        self._wait()

    def stop(self) -> None:
        """A fast shutdown (SIGINT): sessions are ended, then the server exits."""
        self.thaw()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        self._wait()

    def freeze(self) -> None:
        """SIGSTOP every process: connections are accepted by the kernel, never answered."""
        self._signal_group(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal_group(signal.SIGCONT)

    def restart(self) -> PostgresServer:
        self.kill()
        return self.start()

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _wait(self) -> None:
        if self.process is None:
            return
        children = self._processes()[1:]
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.process.wait(timeout=30)
        # Backends orphaned by a killed postmaster must be gone before a restart on the same data.
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in children):
            time.sleep(0.02)
        self.process = None

    def _log_tail(self) -> str:
        try:
            return (self.folder / "server.log").read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


_shared: dict[str, str] = {}
_shared_lock = threading.Lock()


def shared_postgres_url() -> str:
    """The URL of a running PostgreSQL for this test process; raises `PostgresUnavailable` with the reason."""
    configured = os.environ.get(URL_VARIABLE)
    if configured:
        # CI promised a server: a dead one must fail the tests, not skip them.
        try:
            with psycopg.connect(configured, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            raise AssertionError(f"{URL_VARIABLE}={configured} does not answer: {exc}") from exc
        return configured
    with _shared_lock:
        if "error" in _shared:
            raise PostgresUnavailable(_shared["error"])
        if "url" not in _shared:
            try:
                server = PostgresServer().start()
            except PostgresUnavailable as exc:
                _shared["error"] = str(exc)
                raise
            atexit.register(server.remove)
            _shared["url"] = server.url
        return _shared["url"]


@pytest.fixture(scope="session")
def postgres_url() -> str:
    try:
        return shared_postgres_url()
    except PostgresUnavailable as exc:
        skip_or_fail(f"PostgreSQL cannot be started at all: {exc}")
        raise  # unreachable: skip_or_fail raises


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    """A schema of the test's own on the shared server, dropped afterwards."""
    chosen = new_schema()
    yield chosen
    drop_schema(postgres_url, chosen)


@pytest.fixture
def private_postgres() -> Iterator[PostgresServer]:
    """A server of the test's own, which it may kill, stop, freeze and restart."""
    try:
        server = PostgresServer().start()
    except PostgresUnavailable as exc:
        skip_or_fail(f"PostgreSQL cannot be started at all: {exc}")
        raise  # unreachable: skip_or_fail raises
    yield server
    server.remove()
