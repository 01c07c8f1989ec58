"""Fixtures of the Python package's tests: a real leapcache-server process on 127.0.0.1 port 0
(its path in $LEAPCACHE_SERVER_BIN, set by CTest), stopped with SIGTERM at the end and expected
to exit cleanly, and clients of it. Every test registers its namespaces under its own tenant, so
tests sharing a server never see each other's checkpoints."""

import itertools
import os
import select
import signal
import subprocess
import time

import pytest

import leapcache

SERVER_ARGS = ["--memory-budget=64MiB", "--page-bytes=64KiB", "--metrics-listen="]
# More server arguments, space-separated (e.g. a GPU tier for the CUDA tests on a device).
SERVER_ARGS += os.environ.get("LEAPCACHE_TEST_SERVER_ARGS", "").split()


class Server:
    def __init__(self, extra_args=()):
        binary = os.environ.get("LEAPCACHE_SERVER_BIN")
        if not binary:
            raise RuntimeError("LEAPCACHE_SERVER_BIN is not set (CTest sets it)")
        # The server reads LEAPCACHE_<SETTING> variables: none of ours may reach it.
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEAPCACHE_")}
        self.proc = subprocess.Popen(
            [binary, "--listen=127.0.0.1:0", *SERVER_ARGS, *extra_args],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
        self.target = self._read_target(timeout=30.0)

    def _read_target(self, timeout):
        deadline = time.monotonic() + timeout
        buffered = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                buffered += chunk
                for line in buffered.decode(errors="replace").splitlines():
                    if " listening on " in line:
                        return "127.0.0.1:" + line.rsplit(":", 1)[1].strip()
        self.proc.kill()
        raise RuntimeError(f"leapcache-server did not start: {buffered!r}")

    def stop(self):
        """SIGTERM and the exit code; a server that does not drain in time is killed (and its
        code is then not 0)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc.stdout.close()
        return code


@pytest.fixture(scope="module")
def server():
    s = Server()
    try:
        yield s
    finally:
        code = s.stop()
    assert code == 0, "leapcache-server did not exit cleanly"


@pytest.fixture
def client(server):
    with leapcache.Client(server.target) as c:
        yield c


_tenants = itertools.count()


@pytest.fixture
def tenant(request):
    return f"{request.node.name[:200]}-{next(_tenants)}"


def register(client, tenant, **kwargs):
    """A small namespace (dk = dv = 32 keeps every test fast); kwargs override."""
    spec = dict(layers=2, heads=4, dk=32, dv=32, format="fp32")
    spec.update(kwargs)
    return client.register_namespace(tenant, **spec)
