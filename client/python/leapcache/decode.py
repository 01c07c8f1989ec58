"""DecodeSession: attached decode (leapcache/decode_session.h). The service keeps the live
recurrent states of an engine's requests, one slot per request; the engine sends each linear
layer's token inputs and gets the layer's output, and turns a slot into a checkpoint at a block
boundary.

    with client.open_decode(ns, slots=64) as s:
        s.reset(0)                                    # or s.load(0, hit.key)
        for each token, for each linear layer l:
            o = s.step(l, slots, q, k, v, g, beta)    # torch tensors or numpy arrays
        s.commit(0, chain[j])                         # a checkpoint at a block boundary

Inputs, H = the session's heads: q, k [B, H, dk] and v [B, H, dv], float32 or bfloat16 (all
three alike); g [B, H] (GDN) or [B, H, dk] (KDA) and beta [B, H], float32; slots [B] ints, -1
for padding (a zero output). The output o is [B, H, dv] in out_dtype (default: q's dtype).

Host arrays (numpy, torch CPU tensors) go to the service in the step's own message. With
engine= (an Engine attached to the same server over ucx, cuda_ipc or nccl) the inputs are packed
into a staging buffer the session registers with the engine, the service reads them and writes o
there over the engine's transport, and o is copied out: the way for torch CUDA tensors, whose
bytes then never leave the GPU over CUDA IPC. An engine that packs its own buffers calls
step_in_buffer with their offsets instead (no copies at all).

A session is one engine's decode loop: calls are serialized, not concurrent.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Dict, Optional, Sequence, Tuple

from . import _checks, _native
from ._handle import Handle
from .arrays import inspect
from .client import _check
from .data_plane import Buffer, Engine
from .hashing import BlockKey, key_bytes
from .types import DENSE_DTYPES, Namespace, name_of

_STEP_CHANNELS = {"auto": 0, "stream": 1, "shm": 2}


def _slots(slots) -> Tuple[ctypes.Array, int]:
    """A ctypes int32 array of the step's slots, and their count."""
    if hasattr(slots, "tolist"):  # numpy arrays, torch tensors
        slots = slots.tolist()
    try:
        values = [int(s) for s in slots]
    except (TypeError, ValueError):
        raise TypeError(f"slots must be a sequence of ints, got {slots!r}") from None
    if not values:
        raise ValueError("slots is empty: a step takes at least one request")
    if any(s < -1 or s > 0x7FFFFFFF for s in values):
        raise ValueError(f"slots must be >= 0 (or -1 for padding), got {values!r}")
    return (ctypes.c_int32 * len(values))(*values), len(values)


def _dtype(name, what: str) -> int:
    if name not in DENSE_DTYPES:
        raise ValueError(f"{what} must be 'float32' or 'bfloat16', got {name!r}")
    return DENSE_DTYPES[name]


def _bytes_of(array):
    """The bytes of a C-contiguous array as a flat uint8 view: numpy for host memory (torch CPU
    tensors included), torch for CUDA tensors."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(array, torch.Tensor):
        flat = array.reshape(-1).view(torch.uint8)
        return flat if flat.device.type == "cuda" else flat.numpy()
    return array.reshape(-1).view("uint8")


def _copy_bytes(dst, src) -> None:
    if hasattr(dst, "copy_"):
        dst.copy_(src)
    else:
        dst[:] = src


class DecodeSession:
    """A decode session of `namespace` on the server of `options` (Client.open_decode)."""

    def __init__(self, options, namespace: Namespace, *, slots: int, heads=None,
                 l2norm_qk: bool = False, scale: float = 0.0, step_channel: str = "auto"):
        ns = _checks.namespace(namespace)
        h = _checks.heads(ns, heads)
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be an int >= 1, got {slots!r}")
        if step_channel not in _STEP_CHANNELS:
            raise ValueError(f"step_channel must be one of {sorted(_STEP_CHANNELS)}, got "
                             f"{step_channel!r}")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale < 0:
            raise ValueError(f"scale must be a number >= 0 (0: dk^-1/2), got {scale!r}")
        d = _native.new(_native.DecodeOptions, namespace_id=ns.id, namespace_tag=ns.tag,
                        slots=slots, l2norm_qk=1 if l2norm_qk else 0, scale=float(scale),
                        step_channel=_STEP_CHANNELS[step_channel])
        if h is not None:
            d.heads = _native.HeadRange(h[0], h[1])
        lib = _native.lib()
        ptr = ctypes.c_void_p()
        _check(lib.leapcache_decode_open(ctypes.byref(options.native), ctypes.byref(d),
                                         ctypes.byref(ptr)))
        self._handle = Handle(ptr.value, lib.leapcache_decode_destroy, "DecodeSession")
        info = _native.new(_native.DecodeInfo)
        _check(lib.leapcache_decode_info_get(ptr.value, ctypes.byref(info)))
        self._info = info
        self.namespace = ns
        self.slots = slots
        self.id = info.id
        self.layers = info.layers
        self.heads = (info.heads.begin, info.heads.end)
        self.dk = info.dk
        self.dv = info.dv
        self.kind = name_of("kind", info.kind)
        self.backend = info.backend.decode()
        self.state_bytes = info.state_bytes
        # (engine, device, device index) -> (registered staging Buffer, its uint8 array)
        self._stages: Dict[tuple, Tuple[Buffer, object]] = {}

    # ---- lifetime ----

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def close(self) -> None:
        """Closes the session on the server (its slots go) and frees it. Idempotent."""
        self._handle.close()
        self._stages.clear()

    def __enter__(self) -> "DecodeSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (f"DecodeSession(id={self.id}, {self.kind}, layers={self.layers}, "
                f"heads={self.heads}, slots={self.slots}, backend={self.backend!r})")

    # ---- sizes ----

    @property
    def num_heads(self) -> int:
        return self.heads[1] - self.heads[0]

    @property
    def gate_size(self) -> int:
        return 1 if self.kind == "gdn" else self.dk

    def input_bytes(self, batch: int, dtype: str = "float32") -> int:
        """Bytes of one step's packed inputs for `batch` requests (step_in_buffer)."""
        return _native.lib().leapcache_decode_input_bytes(ctypes.byref(self._info), batch,
                                                          _dtype(dtype, "dtype"))

    def output_bytes(self, batch: int, out_dtype: str = "float32") -> int:
        return _native.lib().leapcache_decode_output_bytes(ctypes.byref(self._info), batch,
                                                           _dtype(out_dtype, "out_dtype"))

    # ---- steps ----

    def step(self, layer: int, slots, q, k, v, g, beta, *, out=None,
             out_dtype: Optional[str] = None, engine: Optional[Engine] = None):
        """Steps layer `layer` for the requests in `slots` and returns o [B, H, dv]: `out` when
        given (out_dtype defaults to its dtype), else a new array of q's kind, a torch tensor on
        q's device or a numpy array, in out_dtype (default: q's dtype)."""
        self._layer(layer)
        slot_array, batch = _slots(slots)
        arrays = self._inputs(batch, q, k, v, g, beta)
        dtype = arrays[0].dtype
        device = arrays[0].device
        if out is None:
            out_dtype = dtype if out_dtype is None else out_dtype
            _dtype(out_dtype, "out_dtype")
            out = self._new_output(q, batch, out_dtype)
        o = inspect(out, "out")
        out_dtype = o.dtype if out_dtype is None else out_dtype
        out_code = _dtype(out_dtype, "out_dtype")
        want = (batch, self.num_heads, self.dv)
        if o.shape != want or o.dtype != out_dtype or not o.contiguous or not o.writable:
            raise ValueError(f"out must be a writable C-contiguous {out_dtype} {list(want)} "
                             f"array, got {o.dtype} {list(o.shape)}")
        if engine is None:
            if device != "cpu" or o.device != "cpu":
                raise ValueError("CUDA tensors step through an engine's buffer: pass engine= "
                                 "(an Engine attached over cuda_ipc, nccl or ucx)")
            s = _native.new(_native.DecodeStep, layer=layer,
                            slots=ctypes.cast(slot_array, ctypes.c_void_p), batch=batch,
                            dtype=DENSE_DTYPES[dtype], q=arrays[0].ptr, k=arrays[1].ptr,
                            v=arrays[2].ptr, g=arrays[3].ptr, beta=arrays[4].ptr,
                            out_dtype=out_code)
            with self._handle.use() as p:
                _check(_native.lib().leapcache_decode_step_host(p, ctypes.byref(s), o.ptr,
                                                                o.nbytes))
            return out
        if o.device != device:
            raise ValueError(f"out is in {o.device} memory, the inputs in {device} memory")
        self._step_staged(engine, layer, slot_array, batch, arrays, (q, k, v, g, beta), out,
                          dtype, out_dtype)
        return out

    def step_in_buffer(self, engine: Engine, layer: int, slots, buffer: Buffer, *,
                       input_offset: int, output_offset: int, dtype: str = "float32",
                       out_dtype: str = "float32") -> None:
        """The step with its packed inputs (input_bytes: q, k, v in dtype, then g and beta in
        float32, each whole) at input_offset of a buffer the engine registered, o written at
        output_offset before this returns."""
        if not isinstance(engine, Engine):
            raise TypeError(f"engine must be an Engine, got {type(engine).__name__}")
        if not isinstance(buffer, Buffer):
            raise TypeError(f"buffer must be a Buffer from Engine.register, got "
                            f"{type(buffer).__name__}")
        self._layer(layer)
        slot_array, batch = _slots(slots)
        for name, value in (("input_offset", input_offset), ("output_offset", output_offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        s = _native.new(_native.DecodeBufferStep, layer=layer,
                        slots=ctypes.cast(slot_array, ctypes.c_void_p), batch=batch,
                        dtype=_dtype(dtype, "dtype"), out_dtype=_dtype(out_dtype, "out_dtype"),
                        buffer_id=buffer.id, input_offset=input_offset,
                        output_offset=output_offset)
        with self._handle.use() as p, engine._handle.use() as e:
            _check(_native.lib().leapcache_decode_step_in_buffer(p, e, ctypes.byref(s)))

    @property
    def stepping_through_channel(self) -> bool:
        """Whether the last step through an engine's buffer went through the shared-memory
        step channel."""
        with self._handle.use() as p:
            return bool(_native.lib().leapcache_decode_stepping_through_channel(p))

    # ---- slots ----

    def reset(self, slot: int) -> None:
        """Slot `slot` to the zero state (a request starting from scratch)."""
        with self._handle.use() as p:
            _check(_native.lib().leapcache_decode_reset(p, self._slot(slot)))

    def load(self, slot: int, key) -> Tuple[int, int]:
        """Slot `slot` from the checkpoint at `key`; its position (tokens, blocks). NotFoundError
        on a miss."""
        raw = key_bytes(key)
        pos = _native.Position()
        with self._handle.use() as p:
            _check(_native.lib().leapcache_decode_load(p, self._slot(slot), raw,
                                                       ctypes.byref(pos)))
        return pos.tokens, pos.blocks

    def commit(self, slot: int, key, position=None) -> None:
        """Slot `slot`'s state stored as the checkpoint at `key`, at `position` (tokens,
        blocks; a BlockKey from chain_hashes carries its own)."""
        raw = key_bytes(key)
        tokens, blocks = _checks.position(key, position)
        pos = _native.Position(tokens, blocks)
        with self._handle.use() as p:
            _check(_native.lib().leapcache_decode_commit(p, self._slot(slot), raw,
                                                         ctypes.byref(pos)))

    # ---- internals ----

    def _layer(self, layer) -> None:
        if isinstance(layer, bool) or not isinstance(layer, int) or not \
                0 <= layer < self.layers:
            raise ValueError(f"layer must be an int in [0, {self.layers}), got {layer!r}")

    def _slot(self, slot) -> int:
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < self.slots:
            raise ValueError(f"slot must be an int in [0, {self.slots}), got {slot!r}")
        return slot

    def _inputs(self, batch: int, q, k, v, g, beta):
        """The inputs' ArrayInfos, checked against the session and the batch."""
        hh = self.num_heads
        shapes = {"q": (batch, hh, self.dk), "k": (batch, hh, self.dk), "v": (batch, hh, self.dv),
                  "g": (batch, hh) if self.gate_size == 1 else (batch, hh, self.dk),
                  "beta": (batch, hh)}
        infos = []
        for name, array in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
            info = inspect(array, name)
            if info.shape != shapes[name]:
                raise ValueError(f"{name} has shape {list(info.shape)}; this session's step "
                                 f"for {batch} requests takes {list(shapes[name])}")
            if not info.contiguous:
                raise ValueError(f"{name} is not C-contiguous: pass a contiguous copy")
            infos.append(info)
        if infos[0].dtype not in DENSE_DTYPES:
            raise TypeError(f"q has dtype {infos[0].dtype}: q, k and v are float32 or bfloat16")
        for info, name in zip(infos[1:3], ("k", "v")):
            if info.dtype != infos[0].dtype:
                raise TypeError(f"{name} is {info.dtype}, q is {infos[0].dtype}: q, k and v "
                                "share one dtype")
        for info, name in zip(infos[3:], ("g", "beta")):
            if info.dtype != "float32":
                raise TypeError(f"{name} must be float32, got {info.dtype}")
        for info, name in zip(infos[1:], ("k", "v", "g", "beta")):
            if (info.device, info.device_index) != (infos[0].device, infos[0].device_index):
                raise ValueError(f"{name} is on another device than q")
        return infos

    def _new_output(self, q, batch: int, out_dtype: str):
        shape = (batch, self.num_heads, self.dv)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(q, torch.Tensor):
            return torch.empty(shape, dtype=getattr(torch, out_dtype), device=q.device)
        if out_dtype != "float32":
            raise ValueError("numpy has no bfloat16: pass out= (a torch.bfloat16 tensor) or "
                             "out_dtype='float32'")
        import numpy
        return numpy.empty(shape, dtype=numpy.float32)

    def _step_staged(self, engine, layer, slot_array, batch, infos, arrays, out, dtype,
                     out_dtype) -> None:
        """The step through the session's staging buffer of the inputs' device, registered
        with `engine`: inputs packed in, step_in_buffer, o copied out."""
        sizes = [info.nbytes for info in infos]
        in_bytes = sum(sizes)
        out_bytes = self.output_bytes(batch, out_dtype)
        if in_bytes != self.input_bytes(batch, dtype):
            raise ValueError("the inputs do not pack into the step's input bytes")
        at_out = (in_bytes + 255) // 256 * 256  # o on its own aligned range
        buffer, stage = self._stage(engine, infos[0], at_out + out_bytes)
        offset = 0
        for array, n in zip(arrays, sizes):
            _copy_bytes(stage[offset:offset + n], _bytes_of(array))
            offset += n
        if infos[0].device == "cuda":
            # The service reads the staging buffer from its own context: the copies first.
            import torch
            torch.cuda.synchronize(stage.device)
        self.step_in_buffer(engine, layer, slot_array, buffer, input_offset=0,
                            output_offset=at_out, dtype=dtype, out_dtype=out_dtype)
        _copy_bytes(_bytes_of(out), stage[at_out:at_out + out_bytes])

    def _stage(self, engine, info, nbytes: int):
        """The registered staging buffer for `engine` on the inputs' device, at least nbytes
        long, as (Buffer, uint8 array)."""
        slot = (id(engine), info.device, info.device_index)
        held = self._stages.get(slot)
        if held is not None:
            registered = engine._buffers.get(held[0].id) is held[0]
            if held[0].nbytes < nbytes or not registered:
                if registered:
                    engine.release(held[0])
                held = None
        if held is None:
            if info.device == "cuda":
                import torch
                stage = torch.empty(nbytes, dtype=torch.uint8,
                                    device=torch.device("cuda", max(info.device_index, 0)))
            else:
                import numpy
                stage = numpy.empty(nbytes, dtype=numpy.uint8)
            held = (engine.register(stage), stage)
            self._stages[slot] = held
        return held
