"""Bad input gets the documented exception and changes nothing: arrays of the wrong dtype, shape,
layout, contiguity, device or writability, bad keys, positions and head ranges raise TypeError
or ValueError before anything is sent (the server's counters do not move); what only the server
can refuse raises the LeapcacheError of its gRPC code with the store unchanged; a closed client
raises ClientClosedError."""

import numpy as np
import pytest
import torch

import leapcache
from conftest import register

# Counters that any call reaching the server's store would move.
WATCHED = ("namespaces", "checkpoints", "pending_puts", "lookups", "puts_reserved",
           "puts_committed", "gets", "deletes", "pinned", "bytes_in", "bytes_out")


def snapshot(client):
    s = client.stats()
    return {name: getattr(s, name) for name in WATCHED}


@pytest.fixture
def setup(client, tenant):
    ns = register(client, tenant)
    chain = leapcache.chain_hashes(list(range(64)), 16, salt=tenant)
    good = np.ones(ns.state_shape(), np.float32)
    client.put_from(ns, chain[0], good)
    return client, ns, chain, good


class FakeCudaArray:
    """An object that says it is CUDA memory: the Client must refuse it before any call."""

    def __init__(self, shape, typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (0xDEAD0000, False), "version": 3,
                                         "strides": None}


def bad_arrays(ns):
    shape = ns.state_shape()
    t = torch.zeros(shape)
    return [
        (np.zeros(shape, np.float64), TypeError),
        (np.zeros(shape, np.int32), TypeError),
        (np.zeros(shape, np.float16), TypeError),
        (torch.zeros(shape, dtype=torch.float16), TypeError),
        (np.zeros(shape, ">f4"), TypeError),                            # big-endian
        (np.zeros(shape[1:], np.float32), ValueError),                  # a layer short
        (np.zeros((shape[0], 3) + shape[2:], np.float32), ValueError),  # heads
        (np.zeros(shape + (1,), np.float32), ValueError),
        (np.zeros(ns.state_shape(), np.float32).reshape(-1), ValueError),
        (np.zeros(shape[:2] + (shape[3], shape[2] * 2), np.float32)[..., ::2], ValueError),
        (np.zeros(ns.compact_shape()[:2] + (ns.blob_bytes + 1,), np.uint8), ValueError),
        (np.asfortranarray(np.zeros(shape, np.float32)), ValueError),   # not C order
        (torch.zeros(shape[:2] + (shape[3], shape[2])).transpose(2, 3), ValueError),
        (torch.zeros(shape[0], shape[1] * 2, *shape[2:])[:, ::2], ValueError),
        (FakeCudaArray(shape), ValueError),                             # device memory
        ([[0.0] * 4] * 2, TypeError),
        (b"\x00" * 64, TypeError),
    ]


def test_bad_arrays_send_nothing(setup):
    client, ns, chain, _ = setup
    before = snapshot(client)
    for array, error in bad_arrays(ns):
        with pytest.raises(error):
            client.put_from(ns, chain[1], array)
        with pytest.raises(error):
            client.get_into(ns, chain[0], array)
        with pytest.raises(error):
            client.batch_put_from(ns, [chain[2], chain[1]],
                                  [np.ones(ns.state_shape(), np.float32), array])
    assert snapshot(client) == before
    assert not client.lookup(ns, chain[1:])  # neither the bad nor the good batch item landed


def test_layout_and_head_arguments(setup):
    client, ns, chain, good = setup
    before = snapshot(client)
    cases = [
        (dict(layout="kv?"), ValueError),
        (dict(layout="KV"), ValueError),
        (dict(heads=(0, 5)), ValueError),
        (dict(heads=(2, 2)), ValueError),
        (dict(heads=(-1, 2)), ValueError),
        (dict(heads=range(0, 4, 2)), ValueError),
        (dict(heads=3), TypeError),
        (dict(heads=(0.0, 2.0)), TypeError),
        (dict(heads=(0, 2)), ValueError),  # valid range, but `good` holds all four heads
    ]
    for kwargs, error in cases:
        with pytest.raises(error):
            client.put_from(ns, chain[1], good, **kwargs)
        with pytest.raises(error):
            client.get_into(ns, chain[0], np.empty_like(good), **kwargs)
    blobs = np.empty(ns.compact_shape(), np.uint8)
    with pytest.raises(ValueError, match="layout applies to dense"):
        client.get_into(ns, chain[0], blobs, layout="kv")
    readonly = np.empty_like(good)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        client.get_into(ns, chain[0], readonly)
    assert snapshot(client) == before


def test_bad_keys_namespaces_and_positions(setup):
    client, ns, chain, good = setup
    before = snapshot(client)
    raw = bytes(chain[1])
    with pytest.raises(ValueError, match="position"):
        client.put_from(ns, raw, good)  # a raw key has no position of its own
    for kwargs, error in [(dict(position=(16,)), TypeError), (dict(position=(16.0, 1)), TypeError),
                          (dict(ttl=-1), ValueError), (dict(ttl="5s"), TypeError)]:
        with pytest.raises(error):
            client.put_from(ns, chain[1], good, **kwargs)
    for key, error in [(raw[:31], ValueError), (raw + b"\x00", ValueError), (12345, TypeError),
                       ("zz" * 32, ValueError), (None, TypeError)]:
        with pytest.raises(error):
            client.get_into(ns, key, np.empty_like(good))
        with pytest.raises(error):
            client.put_from(ns, key, good, position=(32, 2))
        with pytest.raises(error):
            client.lookup(ns, [chain[0], key])
        with pytest.raises(error):
            client.delete(ns, key)
    with pytest.raises(TypeError, match="Namespace"):
        client.get_into(ns.id, chain[0], np.empty_like(good))
    with pytest.raises(TypeError):
        client.lookup("ns", chain)
    with pytest.raises(ValueError):
        client.batch_get_into(ns, chain[:2], [np.empty_like(good)])
    with pytest.raises(ValueError):
        client.register_namespace("t", layers=1, heads=1, format="leap7x")
    with pytest.raises(ValueError):
        client.register_namespace("t", layers=1, heads=1, kind="mamba")
    with pytest.raises(TypeError):
        client.register_namespace("t", layers=1.0, heads=1)
    assert snapshot(client) == before
    # The hex spelling of a key is accepted.
    out = np.empty_like(good)
    client.get_into(ns, chain[0].hex(), out)
    assert np.array_equal(out, good)


def test_server_refusals_leave_the_store_unchanged(setup, tenant):
    client, ns, chain, good = setup
    before = snapshot(client)
    nan = good.copy()
    nan[1, 2, 3, 4] = np.nan
    with pytest.raises(leapcache.InvalidArgumentError) as e:
        client.put_from(ns, chain[1], nan)
    assert e.value.code == 3 and "finite" in e.value.message
    blobs = np.empty(ns.compact_shape(), np.uint8)
    client.get_into(ns, chain[0], blobs)
    for where in ((0, 0, 0), (1, 3, 100)):  # a header's magic, a payload byte
        bad = blobs.copy()
        bad[where] ^= 0xFF
        with pytest.raises(leapcache.DataLossError) as e:
            client.put_from(ns, chain[1], bad)
        assert e.value.code == 15
    with pytest.raises(leapcache.AlreadyExistsError):
        client.put_from(ns, chain[0], good)
    with pytest.raises(leapcache.InvalidArgumentError):
        client.register_namespace(tenant, layers=0, heads=4)
    with pytest.raises(leapcache.InvalidArgumentError):
        client.register_namespace(tenant, layers=1, heads=4, format="leap", r=9)
    ghost = leapcache.Namespace(**{**ns.__dict__, "id": ns.id ^ 0x5A5A})
    with pytest.raises(leapcache.NotFoundError):
        client.put_from(ghost, chain[1], good)
    after = snapshot(client)
    for name in ("namespaces", "checkpoints", "pending_puts", "puts_committed", "pinned"):
        assert after[name] == before[name], name
    assert not client.lookup(ns, chain[1:])
    out = np.empty_like(good)
    client.get_into(ns, chain[0], out)
    assert np.array_equal(out, good)


def test_closed_client(server):
    client = leapcache.Client(server.target)
    ns = register(client, "closed-client")
    chain = leapcache.chain_hashes(list(range(16)), 16)
    client.close()
    client.close()  # idempotent
    assert client.closed
    a = np.zeros(ns.state_shape(), np.float32)
    calls = [lambda: client.health(), lambda: client.stats(),
             lambda: client.register_namespace("x", layers=1, heads=1),
             lambda: client.lookup(ns, chain), lambda: client.get_into(ns, chain[0], a),
             lambda: client.put_from(ns, chain[0], a), lambda: client.delete(ns, chain[0]),
             lambda: client.pin(ns, chain[0]), lambda: client.unpin(ns, chain[0]),
             lambda: client.batch_get_into(ns, chain, [a]), lambda: client.attach("e")]
    for i, call in enumerate(calls):
        with pytest.raises(leapcache.ClientClosedError) as e:
            call()
            pytest.fail(f"call {i} ran on a closed client")
        assert isinstance(e.value, leapcache.FailedPreconditionError)
        assert e.value.code == 9 and "closed" in str(e.value)
    with leapcache.Client(server.target) as other:
        assert other.health()
    assert other.closed


def test_unreachable_server_is_unavailable():
    with pytest.raises(leapcache.UnavailableError) as e:
        leapcache.Client("127.0.0.1:1", connect_timeout=0.5)
    assert e.value.code == 14


def test_bad_client_options():
    for kwargs, error in [(dict(target=""), TypeError), (dict(tls="yes"), TypeError),
                          (dict(connect_timeout=0), ValueError), (dict(chunk_bytes=-1), ValueError),
                          (dict(token=5), TypeError)]:
        with pytest.raises(error):
            leapcache.Client(**kwargs)
    # The C++ client's own check: a token in plaintext to a non-loopback target.
    with pytest.raises(leapcache.InvalidArgumentError):
        leapcache.Client("192.0.2.1:7470", token="secret", connect_timeout=0.5)
