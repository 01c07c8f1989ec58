"""Round trips through the real server: dense states (float32 and bfloat16, both layouts, numpy
and torch) and compact blobs byte-exact, head ranges, lookups (alone and batched), batches,
delete/pin/unpin and the stats that count them."""

import numpy as np
import pytest
import torch

import leapcache
from conftest import register

RNG = np.random.default_rng(7)


def states(ns, heads=None, layout="kv"):
    return RNG.standard_normal(ns.state_shape(heads, layout)).astype(np.float32)


def keys(n, salt):
    return leapcache.chain_hashes(list(range(16 * n)), 16, salt=salt)


def test_dense_fp32_exact_both_layouts(client, tenant):
    ns = register(client, tenant)
    chain = keys(3, tenant)
    s = states(ns)
    client.put_from(ns, chain[1], s)
    out = np.full_like(s, np.nan)
    info = client.get_into(ns, chain[1], out)
    assert out.tobytes() == s.tobytes()
    assert (info.tokens, info.blocks, info.encoding, info.layout) == (32, 2, "float32", "kv")
    assert info.total_bytes == s.nbytes and info.heads == (0, 4)
    vk = np.empty(ns.state_shape(layout="vk"), np.float32)
    client.get_into(ns, chain[1], vk, layout="vk")
    assert np.array_equal(vk, s.transpose(0, 1, 3, 2))
    # A put in [.., dv, dk] order is the same checkpoint.
    client.put_from(ns, chain[2], np.ascontiguousarray(s.transpose(0, 1, 3, 2)), layout="vk")
    assert client.get(ns, chain[2]).tobytes() == s.tobytes()


def test_dense_torch_and_bf16(client, tenant):
    ns = register(client, tenant, format="bf16")
    chain = keys(1, tenant)
    s = torch.from_numpy(states(ns)).to(torch.bfloat16)
    client.put_from(ns, chain[0], s)
    out = torch.empty_like(s)
    info = client.get_into(ns, chain[0], out)
    assert info.encoding == "bfloat16"
    # The bf16 codec stores bf16 values as they are: every bit comes back.
    assert torch.equal(out.view(torch.int16), s.view(torch.int16))
    as_fp32 = torch.empty(ns.state_shape(), dtype=torch.float32)
    client.get_into(ns, chain[0], as_fp32)
    assert torch.equal(as_fp32, s.float())


def test_compact_blobs_byte_exact(client, tenant):
    ns = register(client, tenant, format="leap8", dk=64, dv=64, layers=1, heads=2)
    chain = keys(2, tenant)
    s = states(ns)
    client.put_from(ns, chain[0], s)
    blobs = np.empty(ns.compact_shape(), np.uint8)
    info = client.get_into(ns, chain[0], blobs)
    assert info.encoding == "compact" and info.blob_bytes == ns.blob_bytes
    assert info.format.codec == "leap" and info.format.bits == 8
    # The blobs put elsewhere come back bit for bit, and decode to the same states.
    client.put_from(ns, chain[1], blobs)
    again = torch.empty(ns.compact_shape(), dtype=torch.uint8)
    client.get_into(ns, chain[1], again)
    assert again.numpy().tobytes() == blobs.tobytes()
    assert np.array_equal(client.get(ns, chain[1]), client.get(ns, chain[0]))
    # The 8-bit window format is near FP32.
    dense = client.get(ns, chain[0])
    assert np.linalg.norm(dense - s) / np.linalg.norm(s) < 2e-2


def test_head_ranges_and_lookup(client, tenant):
    ns = register(client, tenant)
    chain = keys(4, tenant)
    assert not client.lookup(ns, chain)
    lo, hi = states(ns, (0, 2)), states(ns, (2, 4))
    client.put_from(ns, chain[2], lo, heads=(0, 2))
    # Heads 2..4 are not there yet: a full-head lookup misses, the head range hits.
    assert not client.lookup(ns, chain)
    hit = client.lookup(ns, chain, heads=(0, 2))
    assert (hit.hit, hit.index, hit.key, hit.tokens, hit.blocks) == (True, 2, chain[2], 48, 3)
    client.put_from(ns, chain[2], hi, heads=range(2, 4))
    hit = client.lookup(ns, chain)
    assert hit.index == 2 and hit.key.blocks == 3
    assert np.array_equal(client.get(ns, hit.key), np.concatenate([lo, hi], axis=1))
    part = np.empty(ns.state_shape((1, 3)), np.float32)
    info = client.get_into(ns, hit.key, part, heads=(1, 3))
    assert info.heads == (1, 3)
    assert np.array_equal(part, np.concatenate([lo, hi], axis=1)[:, 1:3])
    # The deepest checkpoint wins; max_depth caps the walk.
    client.put_from(ns, chain[0], states(ns))
    assert client.lookup(ns, chain).index == 2
    assert client.lookup(ns, chain, max_depth=2).index == 0
    # Raw 32-byte keys work too (position given explicitly on puts).
    raw = [bytes(k) for k in chain]
    assert client.lookup(ns, raw, block_tokens=16).index == 2


def test_lookup_batch_answers_each_chain_as_lookup(client, tenant):
    ns = register(client, tenant)
    a, b, c = keys(4, tenant), keys(4, tenant + "-b"), keys(4, tenant + "-c")
    client.put_from(ns, a[2], states(ns))
    client.put_from(ns, b[0], states(ns))
    client.put_from(ns, b[3], states(ns, (0, 2)), heads=(0, 2))
    chains = [a, b, c, a, [bytes(k) for k in b]]
    got = client.lookup_batch(ns, chains, max_depth=[0, 0, 0, 2, 0], block_tokens=16)
    assert [r.index if r else None for r in got] == [2, 0, None, None, 0]
    for r, chain, depth in zip(got, chains, [0, 0, 0, 2, 0]):
        alone = client.lookup(ns, chain, max_depth=depth, block_tokens=16)
        assert (r.hit, r.index, r.tokens, r.blocks) == (alone.hit, alone.index, alone.tokens,
                                                       alone.blocks)
    assert got[0].key == a[2] and got[0].key.blocks == 3 and got[0].tokens == 48
    # The head range reaches b's deeper, half-head checkpoint.
    assert [r.index for r in client.lookup_batch(ns, [b, a], heads=(0, 2))] == [3, 2]
    # An item the server refuses fails alone, with lookup's error and message.
    empty = client.lookup_batch(ns, [a, []])
    assert empty[0].index == 2
    assert isinstance(empty[1], leapcache.InvalidArgumentError) and "chain" in str(empty[1])


def test_lookup_batch_checks_before_sending(client, tenant):
    ns = register(client, tenant)
    chain = keys(2, tenant)
    before = client.stats().lookups
    with pytest.raises(ValueError):
        client.lookup_batch(ns, [])
    with pytest.raises(ValueError):
        client.lookup_batch(ns, [chain] * 4097)
    with pytest.raises(ValueError):
        client.lookup_batch(ns, [chain, chain], max_depth=[0])
    with pytest.raises(ValueError):
        client.lookup_batch(ns, [chain], max_depth=[-1])
    with pytest.raises(TypeError):
        client.lookup_batch(ns, [[object()]])
    assert client.stats().lookups == before


def test_batches_report_each_item(client, tenant):
    ns = register(client, tenant)
    chain = keys(3, tenant)
    data = [states(ns) for _ in chain]
    assert client.batch_put_from(ns, chain[:2], data[:2]) == [None, None]
    again = client.batch_put_from(ns, chain, data)
    assert isinstance(again[0], leapcache.AlreadyExistsError)
    assert isinstance(again[1], leapcache.AlreadyExistsError)
    assert again[2] is None
    client.delete(ns, chain[1])
    outs = [np.empty_like(d) for d in data]
    got = client.batch_get_into(ns, chain, outs)
    assert isinstance(got[1], leapcache.NotFoundError) and got[1].code == 5
    for i in (0, 2):
        assert got[i].blocks == i + 1 and np.array_equal(outs[i], data[i])


def test_delete_pin_unpin_and_stats(client, tenant):
    ns = register(client, tenant)
    chain = keys(1, tenant)
    before = client.stats()
    client.put_from(ns, chain[0], states(ns), ttl=5.0)
    after = client.stats()
    assert after.checkpoints == before.checkpoints + 1
    assert after.puts_committed == before.puts_committed + 1
    assert after.tiers and after.tiers[0].name == "host"
    assert any(m.format == "fp32" for m in after.memory)
    client.pin(ns, chain[0])
    assert client.stats().pinned == before.pinned + 1
    client.unpin(ns, chain[0])
    with pytest.raises(leapcache.FailedPreconditionError):
        client.unpin(ns, chain[0])
    client.delete(ns, chain[0])
    assert client.stats().checkpoints == before.checkpoints
    with pytest.raises(leapcache.NotFoundError):
        client.get(ns, chain[0])
    with pytest.raises(leapcache.NotFoundError):
        client.delete(ns, chain[0])


def test_health_and_namespace_identity(client, tenant):
    assert client.health()
    a = register(client, tenant, format="leap6", dk=128, dv=128)
    b = register(client, tenant, format="leap-6", dk=128, dv=128)
    assert a == b and a.format_label == "leap6" and a.format.r == 6
    assert len(a.fingerprint) == 64
    c = register(client, tenant, kind="kda")
    assert c.id != a.id
