"""Start and stop real `redis-server` processes on 127.0.0.1 for the tests.

`shared_redis_url()` gives the server every Redis test may use: the one named by
``CONVMEM_REDIS_URL`` (CI starts it), else one started here once per test
process. `shared_redis_cluster_url()` does the same for a Redis Cluster of three
masters (``CONVMEM_REDIS_CLUSTER_URL``), joined with ``redis-cli --cluster create``.
Tests that stop or kill Redis start their own `RedisServer` or `RedisClusterServers`.
Each test works under its own random key prefix, so tests never see each
other's keys even on a shared server.

Without ``redis-server`` the tests skip, unless ``CONVMEM_REQUIRE_SERVERS=1``
(CI), which turns the skip into a failure. `open_shared_store` opens any
store that several processes can share, by kind.
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
import redis.cluster

from convmem import PostgresStore, RedisStore, SQLiteStore, Store

__all__ = [
    "SHARED_KINDS",
    "RedisClusterServers",
    "RedisServer",
    "RedisUnavailable",
    "delete_prefix",
    "free_port",
    "new_prefix",
    "open_shared_store",
    "private_redis",
    "redis_cluster_url",
    "redis_url",
    "shared_redis_cluster_url",
    "shared_redis_url",
    "skip_or_fail",
]

URL_VARIABLE = "CONVMEM_REDIS_URL"
CLUSTER_URL_VARIABLE = "CONVMEM_REDIS_CLUSTER_URL"
REQUIRE_VARIABLE = "CONVMEM_REQUIRE_SERVERS"
# Stores that several processes can open at once, by the kind names the tests use.
SHARED_KINDS = ("sqlite", "redis", "redis-cluster", "postgres")


def skip_or_fail(reason: str) -> None:
    """Skip the test for a missing server, or fail it where servers are required (CI)."""
    if os.environ.get(REQUIRE_VARIABLE, "") not in ("", "0"):
        pytest.fail(f"{reason} (and {REQUIRE_VARIABLE} is set, so this is a failure, not a skip)")
    pytest.skip(reason)


class RedisUnavailable(RuntimeError):
    """No Redis server can be used: the reason says why."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def new_prefix() -> str:
    return f"convmem-test-{uuid.uuid4().hex}"


def delete_prefix(url: str, prefix: str, *, cluster: bool = False) -> None:
    """Delete every key under `prefix` (a random hex prefix, so the pattern is literal)."""
    if cluster:
        nodes = redis.cluster.RedisCluster.from_url(url)
        try:
            urls = [f"redis://{node.host}:{node.port}/0" for node in nodes.get_primaries()]
        finally:
            nodes.close()
    else:
        urls = [url]
    for node_url in urls:
        client = redis.Redis.from_url(node_url)
        try:
            for key in list(client.scan_iter(match=f"{prefix}:*", count=1000)):
                client.delete(key)  # one by one: keys of different slots cannot go in one DEL
        finally:
            client.close()


class RedisServer:
    """One redis-server child process on 127.0.0.1.

    ``persistent=True`` turns on the append-only file with an fsync per write,
    so a server killed with SIGKILL and restarted on the same folder keeps
    every acknowledged write; otherwise nothing is saved to disk.
    """

    def __init__(self, *, persistent: bool = False, port: int | None = None, cluster: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisUnavailable(
                "redis-server is not installed (Debian: apt-get install redis-server); "
                f"or set {URL_VARIABLE} to a running server"
            )
        self.binary = binary
        self.persistent = persistent
        self.cluster = cluster
        self.port = port or free_port()
        self.bus_port = free_port() if cluster else 0
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
        if self.cluster:
            # The bus port is given explicitly: port + 10000 may not exist for a high free port.
            persistence += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                            "--cluster-port", str(self.bus_port), "--cluster-node-timeout", "5000"]  # fmt: skip
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


class RedisClusterServers:
    """Three `redis-server --cluster-enabled yes` masters joined into one Cluster, no replicas.

    ``persistent=True`` gives every node the append-only file with an fsync per write
    (see `RedisServer`): a node killed and started again on its folder comes back with
    its slots (nodes.conf) and every write it acknowledged.
    """

    def __init__(self, masters: int = 3, *, persistent: bool = False) -> None:
        if shutil.which("redis-cli") is None:
            raise RedisUnavailable("redis-cli is not installed (Debian: apt-get install redis-tools)")
        self.nodes = [RedisServer(cluster=True, persistent=persistent) for _ in range(masters)]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}"

    def start(self, timeout: float = 60.0) -> RedisClusterServers:
        for node in self.nodes:
            node.start()
        created = subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, timeout=timeout, check=False,
        )  # fmt: skip
        if created.returncode != 0:
            self.remove()
            raise RedisUnavailable(f"redis-cli --cluster create failed: {created.stdout[-2000:]!r}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._node_ok(node) for node in self.nodes):
                return self
            time.sleep(0.1)
        self.remove()
        raise RedisUnavailable(f"the Redis Cluster did not reach cluster_state:ok within {timeout} s")

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Wait until every node reports cluster_state:ok (after a node came back)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._node_ok(node) for node in self.nodes):
                return
            time.sleep(0.1)
        raise RedisUnavailable(f"the Redis Cluster did not return to cluster_state:ok within {timeout} s")

    @staticmethod
    def _node_ok(node: RedisServer) -> bool:
        client = redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=1)
        try:
            info = client.execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            return "cluster_state:ok" in text
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()


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


def shared_redis_cluster_url() -> str:
    """The URL of a running Redis Cluster for this test process; raises `RedisUnavailable`."""
    configured = os.environ.get(CLUSTER_URL_VARIABLE)
    if configured:
        try:
            redis.cluster.RedisCluster.from_url(configured, socket_connect_timeout=2).close()
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
            raise AssertionError(f"{CLUSTER_URL_VARIABLE}={configured} does not answer: {exc}") from exc
        return configured
    with _shared_lock:
        if "cluster error" in _shared:
            raise RedisUnavailable(_shared["cluster error"])
        if "cluster url" not in _shared:
            try:
                cluster = RedisClusterServers().start()
            except RedisUnavailable as exc:
                _shared["cluster error"] = str(exc)
                raise
            atexit.register(cluster.remove)
            _shared["cluster url"] = cluster.url
        return _shared["cluster url"]


@pytest.fixture(scope="session")
def redis_url() -> str:
    try:
        return shared_redis_url()
    except RedisUnavailable as exc:
        skip_or_fail(f"Redis cannot be started at all: {exc}")
        raise  # unreachable: skip_or_fail raises


@pytest.fixture(scope="session")
def redis_cluster_url() -> str:
    try:
        return shared_redis_cluster_url()
    except RedisUnavailable as exc:
        skip_or_fail(f"a Redis Cluster cannot be started at all: {exc}")
        raise  # unreachable: skip_or_fail raises


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    """A server of the test's own (append-only file, fsync per write) that it may kill and restart."""
    try:
        server = RedisServer(persistent=True).start()
    except RedisUnavailable as exc:
        skip_or_fail(f"Redis cannot be started at all: {exc}")
        raise  # unreachable: skip_or_fail raises
    yield server
    server.remove()


def open_shared_store(kind: str, location: str, prefix: str) -> Store:
    """A store of `kind` that every process given the same `location` and `prefix` shares.

    `location` is a file (sqlite) or a URL; `prefix` is the key prefix (Redis) or the
    schema (PostgreSQL).
    """
    if kind == "sqlite":
        return SQLiteStore(location)
    if kind == "redis":
        return RedisStore(location, prefix=prefix)
    if kind == "redis-cluster":
        return RedisStore(location, cluster=True, prefix=prefix)
    if kind == "postgres":
        return PostgresStore(location, schema=prefix)
    raise ValueError(f"{kind} stores cannot be shared between processes")
