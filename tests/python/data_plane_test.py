"""The data plane from Python: an Engine attached over inline gRPC (and UCX over TCP where the
library has it), checkpoints moved into and out of views of registered host buffers, the checks
that keep a transfer inside them, and closing."""

import numpy as np
import pytest
import torch

import leapcache
from conftest import register

TRANSPORTS = [t for t in ("inline", "ucx") if t in leapcache.transports_built()]


def attach(client, transport, name):
    kwargs = {"ucx_transports": "tcp"} if transport == "ucx" else {}
    return client.attach(name, transports=(transport,), **kwargs)


def test_inline_is_always_built():
    assert "inline" in leapcache.transports_built()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_round_trip_through_registered_views(client, tenant, transport):
    with attach(client, transport, f"engine-{transport}") as engine:
        assert engine.transport == transport and engine.session_id > 0
        # Registered through the engine's own client: its transfers carry the namespace's tag.
        ns = register(engine.client, tenant)
        chain = leapcache.chain_hashes(list(range(16 * 3)), 16, salt=tenant)
        rng = np.random.default_rng(3)
        states = rng.standard_normal(ns.state_shape()).astype(np.float32)
        slab = np.zeros((3,) + ns.state_shape(), np.float32)  # three state slots
        engine.register(slab)
        slab[0] = states
        engine.put_from(ns, chain[0], slab[0])
        info = engine.get_into(ns, chain[0], slab[2])
        assert slab[2].tobytes() == states.tobytes() and np.all(slab[1] == 0)
        assert info.total_bytes == states.nbytes and info.blocks == 1
        if transport != "inline":
            assert info.crc32c == leapcache.crc32c(states.tobytes())
        # Compact blobs and a torch tensor of bfloat16, in buffers of their own.
        blobs = torch.zeros(ns.compact_shape(), dtype=torch.uint8)
        engine.register(blobs)
        engine.get_into(ns, chain[0], blobs)
        assert blobs.numpy().tobytes() == client.get(ns, chain[0], dtype="uint8").tobytes()
        engine.put_from(ns, chain[1], blobs)
        bf16 = torch.zeros(ns.state_shape(), dtype=torch.bfloat16)
        engine.register(bf16)
        engine.get_into(ns, chain[1], bf16)
        assert torch.equal(bf16, torch.from_numpy(states).to(torch.bfloat16))
        # Batches and what the plain client sees of them.
        results = engine.batch_get_into(ns, [chain[0], chain[2]], [slab[1], slab[2]])
        assert isinstance(results[1], leapcache.NotFoundError)
        assert np.array_equal(slab[1], states)
        assert engine.batch_put_from(ns, [chain[2]], [slab[1]]) == [None]
        assert client.lookup(ns, chain).index == 2


def test_engine_lookups_answer_as_the_client(client, tenant):
    with attach(client, "inline", "engine-lookups") as engine:
        ns = register(engine.client, tenant)
        chain = leapcache.chain_hashes(list(range(16 * 4)), 16, salt=tenant)
        other = leapcache.chain_hashes(list(range(16 * 4)), 16, salt=tenant + "-other")
        states = np.random.default_rng(5).standard_normal(ns.state_shape()).astype(np.float32)
        client.put_from(ns, chain[2], states)
        chains = [chain, other, chain, []]
        got = engine.lookup_batch(ns, chains, max_depth=[0, 0, 2, 0])
        want = client.lookup_batch(ns, chains, max_depth=[0, 0, 2, 0])
        summary = [(r.hit, r.index, r.tokens) for r in got[:3]]
        assert summary == [(r.hit, r.index, r.tokens) for r in want[:3]]
        assert summary == [(True, 2, 48), (False, -1, 0), (False, -1, 0)]
        assert got[0].key == chain[2] and not got[1] and not got[2]
        assert isinstance(got[3], leapcache.InvalidArgumentError) and \
            type(want[3]) is type(got[3]) and str(want[3]) == str(got[3])
        assert engine.lookup(ns, chain).index == 2
        with pytest.raises(leapcache.InvalidArgumentError):
            engine.lookup(ns, [])
        with pytest.raises(ValueError):
            engine.lookup_batch(ns, [])


def test_transfer_checks(client, tenant):
    with client.attach("checks", transports=("inline",)) as engine:
        ns = register(engine.client, tenant)
        chain = leapcache.chain_hashes(list(range(16)), 16, salt=tenant)
        slab = np.zeros((2,) + ns.state_shape(), np.float32)
        buf = engine.register(slab)
        before = client.stats()
        with pytest.raises(ValueError, match="registered"):
            engine.put_from(ns, chain[0], np.zeros(ns.state_shape(), np.float32))
        with pytest.raises(ValueError, match="C-contiguous"):
            engine.register(slab.transpose(0, 1, 2, 4, 3))
        with pytest.raises(ValueError, match="shape"):
            engine.get_into(ns, chain[0], slab)
        with pytest.raises(TypeError):
            engine.register([1, 2, 3])
        after = client.stats()
        assert (after.puts_reserved, after.gets) == (before.puts_reserved, before.gets)
        engine.release(buf)
        with pytest.raises(ValueError, match="registered"):
            engine.get_into(ns, chain[0], slab[0])
        with pytest.raises(leapcache.NotFoundError):
            engine.release(buf)
        # Memory that claims to be CUDA but is not: refused by the library, nothing registered.
        class Fake:
            __cuda_array_interface__ = {"shape": (64,), "typestr": "|u1",
                                        "data": (slab.ctypes.data, False), "version": 3}
        with pytest.raises((leapcache.InvalidArgumentError, leapcache.FailedPreconditionError)):
            engine.register(Fake())


def test_attach_arguments_and_close(client):
    for kwargs, error in [(dict(transports=("carrier-pigeon",)), ValueError),
                          (dict(transports=()), ValueError), (dict(session_ttl=0.5), ValueError)]:
        with pytest.raises(error):
            client.attach("bad", **kwargs)
    with pytest.raises(TypeError):
        client.attach("")
    engine = client.attach("closing", transports=("inline",))
    engine_client = engine.client
    engine.detach()
    with pytest.raises(leapcache.FailedPreconditionError):
        engine.register(np.zeros(16, np.uint8))
    engine.close()
    engine.close()
    with pytest.raises(leapcache.ClientClosedError):
        engine_client.health()
    with pytest.raises(leapcache.ClientClosedError):
        engine.register(np.zeros(16, np.uint8))
    assert client.health()  # the Client it came from is untouched


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_batch_gets_and_layer_pages(client, tenant, transport):
    """batch_get_into answers every item as get_into would (a missing key fails alone), whole
    checkpoints and one layer of each into its own page of a registered slab."""
    with attach(client, transport, f"batch-{transport}") as engine:
        ns = register(engine.client, tenant, layers=3, format="leap8")
        chain = leapcache.chain_hashes(list(range(16 * 3)), 16, salt=tenant)
        rng = np.random.default_rng(8)
        for key in chain[:2]:
            engine.client.put_from(ns, key, rng.standard_normal(ns.state_shape()).astype(
                np.float32))
        want = [client.get(ns, key, dtype="uint8") for key in chain[:2]]
        slab = np.zeros((3,) + ns.compact_shape(), np.uint8)
        engine.register(slab)
        got = engine.batch_get_into(ns, [chain[1], chain[2], chain[0]], list(slab))
        assert isinstance(got[1], leapcache.NotFoundError)
        assert got[0].total_bytes == want[1].nbytes and got[2].layers == 3
        assert np.array_equal(slab[0], want[1]) and np.array_equal(slab[2], want[0])
        assert not slab[1].any()
        # Layer 2 of both checkpoints, each into a one-layer page.
        pages = np.zeros((2, 1) + ns.compact_shape()[1:], np.uint8)
        engine.register(pages)
        got = engine.batch_get_into(ns, chain[:2], list(pages), layers=(2, 3))
        assert [g.first_layer for g in got] == [2, 2]
        assert np.array_equal(pages[0][0], want[0][2]) and np.array_equal(pages[1][0], want[1][2])
