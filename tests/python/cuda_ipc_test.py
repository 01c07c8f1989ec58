"""The data plane into CUDA memory (run on a GPU machine; skipped without CUDA, and not part of
the CPU CI): an Engine attached over CUDA IPC moves compact checkpoints byte for byte into and
out of registered torch CUDA tensors, whole and by head range, with and without conv states,
and joins dense states and conv states in its CUDA staging buffer. With
LEAPCACHE_TEST_SERVER_ARGS="--gpu-memory-budget=1GiB --gpu-device=0" the checkpoints live in the
server's GPU tier and gets copy device to device."""

import numpy as np
import pytest
import torch

import leapcache
from conftest import register

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CONV = leapcache.ConvShape(channels=384, width=3, dtype="bfloat16")
DEV = torch.device("cuda", 0)


@pytest.fixture
def engine(client):
    with client.attach("cuda-ipc-test", transports=("cuda_ipc",), gpu_index=0) as e:
        assert e.transport == "cuda_ipc"
        yield e


def keys(n, salt):
    return leapcache.chain_hashes(list(range(16 * n)), 16, salt=salt)


@pytest.mark.parametrize("conv", [None, CONV], ids=["plain", "conv"])
def test_compact_units_byte_for_byte_into_cuda(client, engine, tenant, conv):
    ns = register(engine.client, tenant, format="leap8", conv=conv, extra_bytes=4 if conv else 0)
    key = keys(1, tenant)[0]
    rng = np.random.default_rng(5)
    states = rng.standard_normal(ns.state_shape()).astype(np.float32)
    put = {}
    if conv:
        put = dict(conv=torch.from_numpy(rng.standard_normal(ns.conv_shape()).astype(
            np.float32)).bfloat16(), extra=rng.integers(0, 256, ns.extra_shape(), np.uint8))
    client.put_from(ns, key, states, **put)
    want = np.empty(ns.units_shape(), np.uint8)
    client.get_into(ns, key, want)  # the stored units, read over gRPC into host memory
    slab = torch.zeros((3,) + ns.units_shape(), dtype=torch.uint8, device=DEV)
    engine.register(slab)
    engine.get_into(ns, key, slab[1])
    torch.cuda.synchronize()
    assert torch.equal(slab[1].cpu(), torch.from_numpy(want))
    assert int(slab[0].abs().sum()) == 0 and int(slab[2].abs().sum()) == 0
    # A head range: its units, in (layer, head) order.
    part = torch.zeros(ns.units_shape((1, 3)), dtype=torch.uint8, device=DEV)
    engine.register(part)
    engine.get_into(ns, key, part, heads=(1, 3))
    assert torch.equal(part.cpu(), torch.from_numpy(np.ascontiguousarray(want[:, 1:3])))
    # The units put back from CUDA memory are the same checkpoint under another key.
    other = keys(2, tenant)[1]
    engine.put_from(ns, other, slab[1])
    again = np.empty_like(want)
    client.get_into(ns, other, again)
    assert np.array_equal(again, want)


def test_dense_states_and_conv_states_through_the_cuda_staging_buffer(client, engine, tenant):
    ns = register(engine.client, tenant, format="fp32", conv=CONV)
    key = keys(1, tenant)[0]
    g = torch.Generator(device=DEV).manual_seed(3)
    states = torch.randn(ns.state_shape(layout="vk"), generator=g, device=DEV)
    conv = torch.randn(ns.conv_shape(), generator=g, device=DEV).bfloat16()
    engine.put_from(ns, key, states, layout="vk", conv=conv)
    out = torch.full_like(states, float("nan"))
    got = torch.zeros_like(conv)
    info = engine.get_into(ns, key, out, layout="vk", conv=got)
    torch.cuda.synchronize()
    assert info.side_bytes == ns.side_bytes
    assert torch.equal(out, states)  # fp32: lossless
    assert torch.equal(got.view(torch.int16), conv.view(torch.int16))
    # The host Client reads the same checkpoint.
    host = np.empty(ns.state_shape(), np.float32)
    host_conv = torch.empty(ns.conv_shape(), dtype=torch.bfloat16)
    client.get_into(ns, key, host, conv=host_conv)
    assert np.array_equal(host, states.transpose(2, 3).cpu().numpy())
    assert torch.equal(host_conv.view(torch.int16), conv.cpu().view(torch.int16))


def test_decode_steps_on_cuda_tensors_through_the_engine(client, engine, tenant):
    """A DecodeSession stepping torch CUDA tensors through the engine's CUDA staging buffer
    gives bit for bit the outputs of the same steps sent as host arrays in messages."""
    ns = register(client, tenant, layers=1, heads=4, dk=128, dv=128, format="leap8")
    rng = np.random.default_rng(9)
    steps = []
    for _ in range(3):
        q, k, v = (rng.standard_normal((2, 4, 128)).astype(np.float32) for _ in range(3))
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
        g = -rng.uniform(0.01, 0.5, (2, 4)).astype(np.float32)
        beta = rng.uniform(0.1, 0.9, (2, 4)).astype(np.float32)
        steps.append((q, k, v, g, beta))
    outs = []
    for on_gpu in (False, True):
        with client.open_decode(ns, slots=2) as s:
            s.reset(0)
            s.reset(1)
            got = []
            for q, k, v, g, beta in steps:
                args = [torch.from_numpy(x) for x in (q, k, v, g, beta)]
                if on_gpu:
                    args = [a.to(DEV) for a in args]
                    o = s.step(0, [1, 0], *args, out_dtype="float32", engine=engine)
                    assert o.device == DEV
                else:
                    o = s.step(0, [1, 0], *args, out_dtype="float32")
                got.append(o.cpu().numpy().tobytes())
            outs.append(got)
    assert outs[0] == outs[1]
