"""Start and stop real `redis-server` processes on 127.0.0.1 for the tests.

`shared_redis_url()` gives the server every Redis test may use: the one named by
``CONVMEM_REDIS_URL`` (CI starts it), else one started here once per test
process. Tests that stop or kill Redis start their own `RedisServer`.
Each test works under its own random key prefix, so tests never see each
other's keys even on a shared server.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from convmem import RedisStore, SQLiteStore, Store

__all__ = [
    "RedisServer",
    "RedisUnavailable",
    "delete_prefix",
    "free_port",
    "new_prefix",
    "open_shared_store",
    "private_redis",
    "shared_redis_url",
]

URL_VARIABLE = "CONVMEM_REDIS_URL"


class RedisUnavailable(RuntimeError):
    """No Redis server can be used: the reason says why."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def new_prefix() -> str:
    return f"convmem-test-{uuid.uuid4().hex}"


def delete_prefix(url: str, prefix: str) -> None:
    """Delete every key under `prefix` (a random hex prefix, so the pattern is literal)."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()


class RedisServer:
    """One redis-server child process on 127.0.0.1.

    ``persistent=True`` turns on the append-only file with an fsync per write,
    so a server killed with SIGKILL and restarted on the same folder keeps
    every acknowledged write; otherwise nothing is saved to disk.
    """

    def __init__(self, *, persistent: bool = False, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisUnavailable(
                "redis-server is not installed (Debian: apt-get install redis-server); "
                f"or set {URL_VARIABLE} to a running server"
            )
        self.binary = binary
        self.persistent = persistent
        self.port = port or free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="convmem-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
            if self.persistent
            else ["--appendonly", "no", "--save", ""]
        )
        self.process = subprocess.Popen(
            [
                self.binary,
                "--bind", "127.0.0.1",
                "--port", str(self.port),
                "--dir", str(self.folder),
                "--daemonize", "no",
                "--protected-mode", "yes",
                "--logfile", str(self.folder / "redis.log"),
                *persistence,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RedisUnavailable(f"redis-server exited at start-up: {self._log_tail()}")
            if self.ping():
                return self
            time.sleep(0.02)
        self.stop()
        raise RedisUnavailable(f"redis-server did not answer on port {self.port} within {timeout} s")

    def ping(self) -> bool:
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            return bool(client.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL, like a crash or an OOM kill: no shutdown, no final save."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        self._end(signal.SIGTERM)

    def restart(self) -> RedisServer:
        self.kill()
        return self.start()

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _end(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=10)
        self.process = None

    def _log_tail(self) -> str:
        try:
            return (self.folder / "redis.log").read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


_shared: dict[str, str] = {}
_shared_lock = threading.Lock()


def shared_redis_url() -> str:
    """The URL of a running Redis for this test process; raises `RedisUnavailable` with the reason."""
    configured = os.environ.get(URL_VARIABLE)
    if configured:
        # CI promised a server: a dead one must fail the tests, not skip them.
        client = redis.Redis.from_url(configured, socket_connect_timeout=2)
        try:
            client.ping()
        except (redis.RedisError, OSError) as exc:
            raise AssertionError(f"{URL_VARIABLE}={configured} does not answer: {exc}") from exc
        finally:
            client.close()
        return configured
    with _shared_lock:
        if "error" in _shared:
            raise RedisUnavailable(_shared["error"])
        if "url" not in _shared:
            try:
                server = RedisServer().start()
            except RedisUnavailable as exc:
                _shared["error"] = str(exc)
                raise
            atexit.register(server.remove)
            _shared["url"] = server.url
        return _shared["url"]


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    """A server of the test's own (append-only file, fsync per write) that it may kill and restart."""
    try:
        server = RedisServer(persistent=True).start()
    except RedisUnavailable as exc:
        pytest.skip(f"Redis cannot be started at all: {exc}")
    yield server
    server.remove()


def open_shared_store(kind: str, location: str, prefix: str) -> Store:
    """A store of `kind` that every process given the same `location` and `prefix` shares."""
    if kind == "sqlite":
        return SQLiteStore(location)
    if kind == "redis":
        return RedisStore(location, prefix=prefix)
    raise ValueError(f"{kind} stores cannot be shared between processes")
