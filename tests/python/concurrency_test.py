"""One Client used from many Python threads: concurrent puts, gets and lookups each see their own
bytes; the GIL is released while a call blocks in the library; close() from one thread while
others call lets in-flight calls finish and refuses later ones."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import leapcache
from conftest import Server, register

THREADS = 8
ROUNDS = 6


def test_threads_share_one_client(client, tenant):
    ns = register(client, tenant)
    errors = []

    def worker(w):
        try:
            rng = np.random.default_rng(w)
            chain = leapcache.chain_hashes(list(range(16 * ROUNDS)), 16, salt=f"worker-{w}")
            for i, key in enumerate(chain):
                s = rng.standard_normal(ns.state_shape()).astype(np.float32)
                client.put_from(ns, key, s)
                out = np.empty_like(s)
                client.get_into(ns, key, out)
                assert out.tobytes() == s.tobytes(), f"worker {w} round {i}: wrong bytes"
                assert client.lookup(ns, chain).index == i
        except Exception as e:  # reported in the main thread
            errors.append(e)

    before = client.stats().puts_committed
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert client.stats().puts_committed == before + THREADS * ROUNDS


def wait_stopped(pid, timeout=10.0):
    """Until every thread of `pid` is stopped (state T): SIGSTOP reaches them asynchronously."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                pass
        if states and all(st in "Tt" for st in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"leapcache-server {pid} did not stop")


def test_gil_released_while_a_call_blocks():
    # A stopped server leaves the call blocked in the library until its deadline; the main
    # thread must keep running Python meanwhile.
    server = Server()
    client = leapcache.Client(server.target, rpc_timeout=3.0)
    outcome = {}

    def blocked():
        try:
            outcome["serving"] = client.health()
        except leapcache.LeapcacheError as e:
            outcome["error"] = e

    try:
        assert client.health()
        os.kill(server.proc.pid, signal.SIGSTOP)
        wait_stopped(server.proc.pid)
        t = threading.Thread(target=blocked)
        t.start()
        time.sleep(0.2)  # the thread is inside the call now
        spins, start = 0, time.monotonic()
        while time.monotonic() - start < 1.0:
            spins += 1
        assert t.is_alive(), f"the call returned although the server is stopped: {outcome}"
        # Holding the GIL, the blocked call would have allowed at most a few switches.
        assert spins > 10000
        t.join(timeout=10)
        assert isinstance(outcome.get("error"), leapcache.DeadlineExceededError), outcome
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        client.close()
        code = server.stop()
    assert code == 0


def test_close_while_threads_call(server, tenant):
    client = leapcache.Client(server.target)
    ns = register(client, tenant)
    chain = leapcache.chain_hashes(list(range(16 * 4)), 16, salt=tenant)
    client.put_from(ns, chain[0], np.ones(ns.state_shape(), np.float32))
    outcomes = []
    go = threading.Event()

    def reader():
        out = np.empty(ns.state_shape(), np.float32)
        go.wait()
        deadline = time.monotonic() + 30  # bounded even if close() never came
        while time.monotonic() < deadline:
            try:
                client.get_into(ns, chain[0], out)
                assert np.all(out == 1.0)
            except leapcache.ClientClosedError:
                outcomes.append("closed")
                return
        outcomes.append("never closed")

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    go.set()
    time.sleep(0.05)
    client.close()
    for t in threads:
        t.join(timeout=60)
    # Every reader ran calls until close() and then got ClientClosedError, never a crash.
    assert outcomes == ["closed"] * 4
    with pytest.raises(leapcache.ClientClosedError):
        client.lookup(ns, chain)
