"""Attached decode from Python: a DecodeSession on the real server (CPU backend) steps numpy
arrays and torch tensors exactly as the recurrence defines the step (GDN and KDA, fp32 and bf16
inputs, padding), through the step's message and through an engine's registered buffer alike
(the same bytes), and a slot committed as a checkpoint loads back into another slot and steps on
identically; bad arguments are refused before anything is sent, and a closed session refuses
every call."""

import numpy as np
import pytest
import torch

import leapcache
from conftest import register

ENGINE_TRANSPORTS = [t for t in ("ucx",) if t in leapcache.transports_built()]


def reference_step(kind, S, q, k, v, g, beta, scale):
    """One token of one layer (gpu/reference/recurrence.h), fp32, for every (request, head):
    S [B, H, dk, dv] advanced in place; o [B, H, dv]."""
    q = q.astype(np.float32) * np.float32(scale)
    decay = np.exp(g.astype(np.float32))
    S *= decay[:, :, None, None] if kind == "gdn" else decay[:, :, :, None]
    u = beta[:, :, None] * (v - np.einsum("bhkv,bhk->bhv", S, k))
    S += np.einsum("bhk,bhv->bhkv", k, u)
    return np.einsum("bhkv,bhk->bhv", S, q)


def inputs(rng, batch, heads, dk, dv, kind):
    q = rng.standard_normal((batch, heads, dk)).astype(np.float32)
    k = rng.standard_normal((batch, heads, dk)).astype(np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((batch, heads, dv)).astype(np.float32)
    g_shape = (batch, heads) if kind == "gdn" else (batch, heads, dk)
    g = -rng.uniform(0.01, 0.5, g_shape).astype(np.float32)
    beta = rng.uniform(0.1, 0.9, (batch, heads)).astype(np.float32)
    return q, k, v, g, beta


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_steps_follow_the_recurrence(client, tenant, kind):
    ns = register(client, tenant, kind=kind, layers=2, heads=4, dk=32, dv=32, format="fp32")
    with client.open_decode(ns, slots=3) as s:
        assert (s.layers, s.heads, s.dk, s.dv, s.kind) == (2, (0, 4), 32, 32, kind)
        assert s.backend == "cpu" and s.id > 0
        rng = np.random.default_rng(7)
        S = np.zeros((3, 2, 4, 32, 32), np.float32)  # slot, layer, head
        for slot in range(3):
            s.reset(slot)
        for token in range(3):
            for layer in range(2):
                slots = [2, 0]  # any order
                q, k, v, g, beta = inputs(rng, 2, 4, 32, 32, kind)
                o = s.step(layer, slots, q, k, v, g, beta)
                want = np.empty_like(o)
                for i, slot in enumerate(slots):
                    want[i] = reference_step(kind, S[slot, layer][None], q[i:i + 1], k[i:i + 1],
                                             v[i:i + 1], g[i:i + 1], beta[i:i + 1],
                                             32 ** -0.5)[0]
                np.testing.assert_allclose(o, want, rtol=2e-5, atol=2e-6)
        # The untouched slot 1 still holds the zero state.
        q, k, v, g, beta = inputs(rng, 1, 4, 32, 32, kind)
        want = reference_step(kind, np.zeros((1, 4, 32, 32), np.float32), q, k, v, g, beta,
                              32 ** -0.5)
        np.testing.assert_allclose(s.step(0, [1], q, k, v, g, beta), want, rtol=2e-5, atol=2e-6)


def test_torch_bf16_inputs_padding_and_the_engine_buffer(client, tenant):
    ns = register(client, tenant, layers=1, heads=2, dk=32, dv=32, format="fp32")
    rng = np.random.default_rng(11)
    steps = [inputs(rng, 3, 2, 32, 32, "gdn") for _ in range(3)]
    slots = [1, -1, 0]
    outs = {}
    paths = ["message"] + ENGINE_TRANSPORTS
    for path in paths:
        engine = None
        if path != "message":
            engine = client.attach(f"decode-engine-{path}", transports=(path,),
                                   ucx_transports="tcp")
        try:
            with client.open_decode(ns, slots=3) as s:
                s.reset(0)
                s.reset(1)
                got = []
                for q, k, v, g, beta in steps:
                    as_t = [torch.from_numpy(x) for x in (q, k, v)]
                    bf = [t.to(torch.bfloat16) for t in as_t]
                    o = s.step(0, slots, *bf, torch.from_numpy(g), torch.from_numpy(beta),
                               engine=engine)
                    assert o.dtype == torch.bfloat16 and tuple(o.shape) == (3, 2, 32)
                    assert not torch.any(o[1])  # padding
                    out32 = torch.empty((3, 2, 32), dtype=torch.float32)
                    s.step(0, slots, *bf, torch.from_numpy(g), torch.from_numpy(beta),
                           out=out32, engine=engine)
                    got.append((o.view(torch.int16).numpy().copy(), out32.numpy().copy()))
                outs[path] = got
        finally:
            if engine is not None:
                engine.close()
    for path in paths[1:]:
        for (a16, a32), (b16, b32) in zip(outs["message"], outs[path]):
            assert a16.tobytes() == b16.tobytes() and a32.tobytes() == b32.tobytes(), path


def test_a_committed_slot_loads_back_and_steps_on_identically(client, tenant):
    ns = register(client, tenant, layers=2, heads=2, dk=32, dv=32, format="fp32")
    chain = leapcache.chain_hashes(list(range(32)), 16, salt=tenant)
    rng = np.random.default_rng(5)
    with client.open_decode(ns, slots=2) as s:
        s.reset(0)
        for _ in range(4):
            for layer in range(2):
                s.step(layer, [0], *inputs(rng, 1, 2, 32, 32, "gdn"))
        s.commit(0, chain[1])
        assert client.lookup(ns, chain).index == 1
        assert s.load(1, chain[1]) == (32, 2)
        nxt = inputs(rng, 1, 2, 32, 32, "gdn")
        both = [np.concatenate([x, x]) for x in nxt]
        o = s.step(0, [0, 1], *both)
        assert o[0].tobytes() == o[1].tobytes()
        with pytest.raises(leapcache.NotFoundError):
            s.load(1, chain[0])


def test_bad_arguments_are_refused_before_anything_is_sent(client, tenant):
    ns = register(client, tenant, layers=1, heads=2, dk=32, dv=32, format="fp32")
    with pytest.raises(ValueError, match="slots must be an int >= 1"):
        client.open_decode(ns, slots=0)
    with pytest.raises(ValueError, match="step_channel"):
        client.open_decode(ns, slots=1, step_channel="pipe")
    rng = np.random.default_rng(1)
    s = client.open_decode(ns, slots=1)
    s.reset(0)
    q, k, v, g, beta = inputs(rng, 1, 2, 32, 32, "gdn")
    with pytest.raises(ValueError, match="layer must be"):
        s.step(1, [0], q, k, v, g, beta)
    with pytest.raises(ValueError, match="q has shape"):
        s.step(0, [0], q[:, :1], k, v, g, beta)
    with pytest.raises(TypeError, match="share one dtype"):
        s.step(0, [0], q, k.astype(np.float64), v, g, beta)
    with pytest.raises(TypeError, match="beta must be float32"):
        s.step(0, [0], q, k, v, g, beta.astype(np.float64))
    with pytest.raises(ValueError, match="not C-contiguous"):
        s.step(0, [0], np.asfortranarray(np.repeat(q, 2, axis=0))[:1], k, v, g, beta)
    with pytest.raises(ValueError, match="numpy has no bfloat16"):
        s.step(0, [0], q, k, v, g, beta, out_dtype="bfloat16")
    with pytest.raises(ValueError, match="slot must be"):
        s.reset(1)
    # The server's own refusals: a slot out of the session's range.
    with pytest.raises(leapcache.InvalidArgumentError):
        s.step(0, [5], q, k, v, g, beta)
    s.close()
    with pytest.raises(leapcache.ClientClosedError):
        s.step(0, [0], q, k, v, g, beta)
    s.close()  # idempotent
