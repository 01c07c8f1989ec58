"""Checkpoints with conv states and extra bytes through the real server: each (layer, head)'s
conv state comes back byte for byte beside its recurrent state (compact and dense, numpy and
torch, whole and by head range), puts without them are refused before anything is sent, and a
non-finite conv element is refused by the server and leaves nothing."""

import numpy as np
import pytest
import torch

import leapcache
from conftest import register

RNG = np.random.default_rng(11)

# GDN of 4 heads, dk = dv = 32: conv_dim = 2 x 4 x 32 + 4 x 32 = 384 channels, kernel 4.
CONV = leapcache.ConvShape(channels=384, width=3, dtype="bfloat16")


def conv_ns(client, tenant, **kwargs):
    return register(client, tenant, conv=kwargs.pop("conv", CONV),
                    extra_bytes=kwargs.pop("extra_bytes", 6), **kwargs)


def states(ns, heads=None):
    return RNG.standard_normal(ns.state_shape(heads)).astype(np.float32)


def convs(ns, heads=None):
    return torch.from_numpy(RNG.standard_normal(ns.conv_shape(heads)).astype(np.float32)).to(
        torch.bfloat16 if ns.conv.dtype == "bfloat16" else torch.float16
        if ns.conv.dtype == "float16" else torch.float32)


def extras(ns, heads=None):
    return RNG.integers(0, 256, ns.extra_shape(heads), dtype=np.uint8)


def keys(n, salt):
    return leapcache.chain_hashes(list(range(16 * n)), 16, salt=salt)


def test_namespace_shapes(client, tenant):
    ns = conv_ns(client, tenant)
    assert ns.conv_shape() == (2, 4, 96, 3)
    assert ns.conv_bytes == 96 * 3 * 2
    assert ns.side_bytes == ns.conv_bytes + 6
    assert ns.units_shape((1, 3)) == (2, 2, ns.blob_bytes + ns.side_bytes)
    plain = register(client, tenant)
    assert plain.side_bytes == 0 and plain.fingerprint != ns.fingerprint and plain.id != ns.id


def test_dense_and_compact_round_trip_with_conv(client, tenant):
    ns = conv_ns(client, tenant)
    chain = keys(2, tenant)
    s, c, e = states(ns), convs(ns), extras(ns)
    client.put_from(ns, chain[0], s, conv=c, extra=e)
    out = np.full_like(s, np.nan)
    got_conv = torch.zeros_like(c)
    got_extra = np.zeros_like(e)
    info = client.get_into(ns, chain[0], out, conv=got_conv, extra=got_extra)
    assert out.tobytes() == s.tobytes()  # fp32: lossless
    assert torch.equal(got_conv.view(torch.int16), c.view(torch.int16))
    assert np.array_equal(got_extra, e)
    assert info.side_bytes == ns.side_bytes
    assert info.total_bytes == s.nbytes + 8 * ns.side_bytes

    # Compact: the blobs and the side states separately, or as whole units.
    blobs = np.empty(ns.compact_shape(), np.uint8)
    conv_again = torch.empty_like(c)
    client.get_into(ns, chain[0], blobs, conv=conv_again, extra=np.empty_like(e))
    assert torch.equal(conv_again.view(torch.int16), c.view(torch.int16))
    units = np.empty(ns.units_shape(), np.uint8)
    client.get_into(ns, chain[0], units)
    assert np.array_equal(units[..., :ns.blob_bytes], blobs)
    assert units[..., ns.blob_bytes:ns.blob_bytes + ns.conv_bytes].tobytes() == \
        c.view(torch.int16).numpy().tobytes()
    # A compact put of those units is the same checkpoint under another key.
    client.put_from(ns, chain[1], units)
    again = np.empty_like(units)
    client.get_into(ns, chain[1], again)
    assert np.array_equal(again, units)
    # A get may drop the conv states and extra bytes.
    client.get_into(ns, chain[0], np.empty_like(s))


def test_head_ranges_carry_their_own_conv_states(client, tenant):
    ns = conv_ns(client, tenant, format="leap8", extra_bytes=0)
    key = keys(1, tenant)[0]
    s, c = states(ns), convs(ns)
    for lo, hi in ((0, 2), (2, 4)):
        client.put_from(ns, key, np.ascontiguousarray(s[:, lo:hi]), heads=(lo, hi),
                        conv=c[:, lo:hi].contiguous())
    got = torch.empty(ns.conv_shape((1, 3)), dtype=torch.bfloat16)
    client.get_into(ns, key, np.empty(ns.state_shape((1, 3)), np.float32), heads=(1, 3),
                    conv=got)
    assert torch.equal(got.view(torch.int16), c[:, 1:3].contiguous().view(torch.int16))


def test_batches_with_conv(client, tenant):
    ns = conv_ns(client, tenant, extra_bytes=0)
    chain = keys(3, tenant)
    ss = [states(ns) for _ in chain]
    cs = [convs(ns) for _ in chain]
    assert client.batch_put_from(ns, chain, ss, convs=cs) == [None, None, None]
    outs = [np.empty_like(s) for s in ss]
    got = [torch.empty_like(c) for c in cs]
    results = client.batch_get_into(ns, chain, outs, convs=got)
    assert all(isinstance(r, leapcache.CheckpointInfo) for r in results)
    for o, s, g, c in zip(outs, ss, got, cs):
        assert o.tobytes() == s.tobytes() and torch.equal(g.view(torch.int16), c.view(torch.int16))


def test_missing_or_wrong_side_arrays_are_refused_before_sending(client, tenant):
    ns = conv_ns(client, tenant)
    key = keys(1, tenant)[0]
    s, c, e = states(ns), convs(ns), extras(ns)
    with pytest.raises(ValueError, match="pass conv="):
        client.put_from(ns, key, s, extra=e)
    with pytest.raises(ValueError, match="pass extra="):
        client.put_from(ns, key, s, conv=c)
    with pytest.raises(TypeError, match="keeps it as bfloat16"):
        client.put_from(ns, key, s, conv=c.float(), extra=e)
    with pytest.raises(ValueError, match="has shape"):
        client.put_from(ns, key, s, conv=c[:, :2].contiguous(), extra=e)
    with pytest.raises(ValueError, match="C-contiguous"):
        client.put_from(ns, key, s, conv=c.transpose(2, 3).contiguous().transpose(2, 3), extra=e)
    with pytest.raises(ValueError, match="whole units"):
        client.get_into(ns, key, np.empty(ns.units_shape(), np.uint8), conv=c)
    plain = register(client, tenant)
    with pytest.raises(ValueError, match="do not apply"):
        client.put_from(plain, key, states(plain), conv=c)
    assert not client.lookup(ns, [key])
    assert not client.lookup(plain, [key])


def test_non_finite_conv_state_is_refused_by_the_server(client, tenant):
    ns = conv_ns(client, tenant, extra_bytes=0)
    key = keys(1, tenant)[0]
    c = convs(ns)
    c[1, 2, 5, 1] = float("inf")
    with pytest.raises(leapcache.InvalidArgumentError, match=r"conv state \(layer 1, head 2\)"):
        client.put_from(ns, key, states(ns), conv=c)
    assert not client.lookup(ns, [key])


def test_data_plane_moves_whole_units(client, tenant):
    ns = conv_ns(client, tenant, extra_bytes=0)
    key = keys(1, tenant)[0]
    s = states(ns)
    with client.attach("side-state-engine", transports=["inline"]) as engine:
        with pytest.raises(ValueError, match="moves whole units"):
            engine.get_into(ns, key, np.empty_like(s))  # no conv=: whole units or nothing
        units = np.empty(ns.units_shape(), np.uint8)
        client.put_from(ns, key, s, conv=convs(ns))
        client.get_into(ns, key, units)
        engine.register(units)
        got = np.zeros_like(units)
        engine.register(got)
        engine.get_into(ns, key, got)
        assert np.array_equal(got, units)


def test_data_plane_joins_states_and_conv_states_in_its_staging_buffer(client, tenant):
    ns = conv_ns(client, tenant, format="leap8")
    key = keys(1, tenant)[0]
    s, c, e = torch.from_numpy(states(ns)), convs(ns), torch.from_numpy(extras(ns))
    with client.attach("side-state-staging", transports=["inline"]) as engine:
        engine.put_from(ns, key, s, conv=c, extra=e)
        out = torch.empty_like(s)
        got_conv, got_extra = torch.zeros_like(c), torch.zeros_like(e)
        info = engine.get_into(ns, key, out, conv=got_conv, extra=got_extra)
        assert info.side_bytes == ns.side_bytes
        assert torch.equal(got_conv.view(torch.int16), c.view(torch.int16))
        assert torch.equal(got_extra, e)
        # The states went through the namespace's 8-bit format: what the host Client reads.
        want = np.empty(ns.state_shape(), np.float32)
        client.get_into(ns, key, want, conv=torch.empty_like(c), extra=np.empty_like(e.numpy()))
        assert np.array_equal(out.numpy(), want)
        # A second, smaller get reuses the staging buffer.
        part = torch.empty(ns.state_shape((0, 2)), dtype=torch.float32)
        part_conv = torch.empty(ns.conv_shape((0, 2)), dtype=torch.bfloat16)
        engine.get_into(ns, key, part, heads=(0, 2), conv=part_conv,
                        extra=torch.empty(ns.extra_shape((0, 2)), dtype=torch.uint8))
        assert torch.equal(part_conv.view(torch.int16), c[:, :2].contiguous().view(torch.int16))


def test_data_plane_batches_with_conv(client, tenant):
    ns = conv_ns(client, tenant, extra_bytes=0)
    chain = keys(2, tenant)
    ss = [torch.from_numpy(states(ns)) for _ in chain]
    cs = [convs(ns) for _ in chain]
    with client.attach("side-state-batches", transports=["inline"]) as engine:
        assert engine.batch_put_from(ns, chain, ss, convs=cs) == [None, None]
        outs = [torch.empty_like(s) for s in ss]
        got = [torch.empty_like(c) for c in cs]
        missing = leapcache.chain_hashes(list(range(16)), 16, salt=tenant + "-absent")[0]
        results = engine.batch_get_into(ns, list(chain) + [missing], outs + [torch.empty_like(
            ss[0])], convs=got + [torch.empty_like(cs[0])])
        assert isinstance(results[2], leapcache.NotFoundError)
        for o, s, g, c in zip(outs, ss, got, cs):
            assert torch.equal(o, s) and torch.equal(g.view(torch.int16), c.view(torch.int16))
        with pytest.raises(ValueError, match="2 keys but 1 convs"):
            engine.batch_put_from(ns, chain, ss, convs=cs[:1])


@pytest.mark.parametrize("path", ["client", "engine"])
def test_layer_ranges_read_those_layers(client, tenant, path):
    """layers=(begin, end) reads those layers' states, conv states and extra bytes only (shapes
    counting them), by head range too, through the Client and an Engine's registered views;
    ranges outside the namespace's layers are refused before anything is sent."""
    ns = conv_ns(client, tenant, format="fp32", layers=4)
    key = keys(1, tenant)[0]
    s, c, e = states(ns), convs(ns), extras(ns)
    client.put_from(ns, key, s, conv=c, extra=e)
    engine = client.attach("layer-ranges", transports=["inline"]) if path == "engine" else None
    try:
        for layers, heads in (((1, 3), None), ((3, 4), (1, 3)), (range(0, 4), None)):
            b, end = layers[0], layers[-1] + 1 if isinstance(layers, range) else layers[1]
            shaped = dict(heads=heads, layers=layers)
            h = heads or (0, 4)
            out = torch.zeros(ns.state_shape(heads)[1:], dtype=torch.float32).expand(
                end - b, -1, -1, -1).contiguous()
            got_conv = torch.zeros((end - b,) + ns.conv_shape(heads)[1:], dtype=torch.bfloat16)
            got_extra = torch.zeros((end - b,) + ns.extra_shape(heads)[1:], dtype=torch.uint8)
            reader = engine or client
            if engine is not None:
                engine.register(out)
            info = reader.get_into(ns, key, out, conv=got_conv, extra=got_extra, **shaped)
            assert (info.first_layer, info.layers) == (b, end - b)
            assert np.array_equal(out.numpy(), s[b:end, h[0]:h[1]])
            assert torch.equal(got_conv.view(torch.int16),
                               c[b:end, h[0]:h[1]].contiguous().view(torch.int16))
            assert np.array_equal(got_extra.numpy(), e[b:end, h[0]:h[1]])
        if engine is None:  # compact blobs of two layers: the whole units' blobs there
            compact = client.get(ns, key, dtype="uint8", layers=(2, 4))
            whole = np.empty(ns.units_shape(), np.uint8)
            client.get_into(ns, key, whole)
            assert np.array_equal(compact, whole[2:4, :, :ns.blob_bytes])
        for bad in ((2, 2), (3, 5), (-1, 2), (1,), "0:2"):
            with pytest.raises((ValueError, TypeError)):
                (engine or client).get_into(ns, key, np.empty(ns.state_shape(), np.float32),
                                            layers=bad)
    finally:
        if engine is not None:
            engine.close()
