"""The checks of a call's arguments that run before anything is sent: the namespace, the key and
its position, the head range, and the caller's array against the namespace's shapes (dtype,
layout, shape, contiguity, device, writability). Each failure is a TypeError or ValueError
naming the argument."""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from . import _native
from .arrays import ArrayInfo, inspect
from .hashing import BlockKey, key_bytes
from .types import (DENSE_DTYPES, DTYPE_COMPACT, LAYOUTS, Namespace, normalize_heads,
                    normalize_layers)


def namespace(ns) -> Namespace:
    if not isinstance(ns, Namespace):
        raise TypeError(f"namespace must be the Namespace that register_namespace returned, got "
                        f"{type(ns).__name__}")
    return ns


def heads(ns: Namespace, value) -> Optional[Tuple[int, int]]:
    return normalize_heads(value, ns.heads)


def head_range(h: Optional[Tuple[int, int]]):
    """The library's HeadRange of (begin, end), or None for all heads."""
    return None if h is None else _native.HeadRange(h[0], h[1])


def layers(ns: Namespace, value) -> Optional[Tuple[int, int]]:
    return normalize_layers(value, ns.layers)


def layer_range(lr: Optional[Tuple[int, int]]):
    """The library's LayerRange of (begin, end), or None for every layer."""
    return None if lr is None else _native.LayerRange(lr[0], lr[1])


def of_layers(ns: Namespace, lr: Optional[Tuple[int, int]]) -> Namespace:
    """The namespace as a read of layers `lr` sees it: its shapes then count those layers."""
    return ns if lr is None else dataclasses.replace(ns, layers=lr[1] - lr[0])


def position(key, value) -> Tuple[int, int]:
    """(tokens, blocks) of a put: `value` if given, else the BlockKey's own."""
    if value is not None:
        try:
            tokens, blocks = value
        except (TypeError, ValueError):
            raise TypeError(f"position must be (tokens, blocks), got {value!r}") from None
        if isinstance(tokens, bool) or isinstance(blocks, bool) or \
                not isinstance(tokens, int) or not isinstance(blocks, int):
            raise TypeError(f"position must be two ints (tokens, blocks), got {value!r}")
        return tokens, blocks
    if isinstance(key, BlockKey) and key.blocks is not None and key.tokens is not None:
        return key.tokens, key.blocks
    raise ValueError("position=(tokens, blocks) is required for a key that is not a BlockKey "
                     "from chain_hashes")


def ttl_ms(ttl) -> int:
    if ttl is None:
        return 0
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"ttl must be seconds (a number), got {type(ttl).__name__}")
    if ttl <= 0:
        raise ValueError(f"ttl must be positive seconds, got {ttl}")
    return max(1, int(round(ttl * 1000)))


def put_target(ns: Namespace, key, pos, h, ttl) -> _native.PutTarget:
    raw = key_bytes(key)
    tokens, blocks = position(key, pos)
    t = _native.new(_native.PutTarget, namespace_id=ns.id,
                    position=_native.Position(tokens, blocks), ttl_ms=ttl_ms(ttl))
    t.hash[:] = raw
    if h is not None:
        t.heads = _native.HeadRange(h[0], h[1])
    return t


def states(ns: Namespace, array, what: str, h, layout, writing: bool,
           device: Optional[str] = "cpu", whole_units: Optional[bool] = None
           ) -> Tuple[ArrayInfo, _native.Encoding]:
    """The array's ArrayInfo and the encoding its dtype asks for, once it matches the namespace:
    uint8 [layers, heads, blob_bytes] is compact v1 blobs (or, for a namespace with a side
    state, [layers, heads, blob_bytes + side_bytes]: whole units); float32 or bfloat16
    [layers, heads, dk, dv] (layout "kv") or [layers, heads, dv, dk] ("vk") dense states.
    `device` "cpu": host memory only; None: any. whole_units: the array must hold whole units
    for a namespace with a side state (default: when device is None, the data plane without
    conv= and extra=)."""
    info = inspect(array, what)
    if info.dtype == "uint8":
        if layout is not None:
            raise ValueError(f"layout applies to dense states; {what} is uint8, which is "
                             "compact v1 blobs")
        expected = ns.compact_shape(h)
        encoding = _native.Encoding(DTYPE_COMPACT, 0)
        described = "[layers, heads, blob_bytes] uint8"
        if ns.side_bytes > 0 and info.shape == tuple(ns.units_shape(h)):
            expected = ns.units_shape(h)  # whole units: each blob with its side state
    elif info.dtype in DENSE_DTYPES:
        layout = "kv" if layout is None else layout
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be 'kv' ([.., dk, dv]) or 'vk' ([.., dv, dk]), got "
                             f"{layout!r}")
        expected = ns.state_shape(h, layout)
        encoding = _native.Encoding(DENSE_DTYPES[info.dtype], LAYOUTS[layout])
        described = ("[layers, heads, dk, dv]" if layout == "kv"
                     else "[layers, heads, dv, dk]") + f" {info.dtype}"
    else:
        raise TypeError(f"{what} has dtype {info.dtype}: dense states are float32 or bfloat16, "
                        "compact v1 blobs uint8")
    if whole_units is None:
        whole_units = device is None
    if whole_units and ns.side_bytes > 0 and tuple(expected) != tuple(ns.units_shape(h)):
        raise ValueError(f"namespace {ns.id} stores a side state with every (layer, head): the "
                         f"data plane moves whole units: pass conv= (and extra=) beside "
                         f"{what}, or {what} as uint8 {list(ns.units_shape(h))} ([layers, heads, "
                         "blob_bytes + side_bytes])")
    if info.shape != tuple(expected):
        raise ValueError(f"{what} has shape {list(info.shape)}; namespace {ns.id} takes "
                         f"{list(expected)} ({described})")
    if not info.contiguous:
        raise ValueError(f"{what} is not C-contiguous: pass a contiguous copy "
                         "(numpy.ascontiguousarray, tensor.contiguous())")
    if writing and not info.writable:
        raise ValueError(f"{what} is read-only")
    if device is not None and info.device != device:
        raise ValueError(f"{what} is in {info.device} memory: the Client moves host memory; "
                         "attach an Engine (Client.attach) and register device buffers")
    return info, encoding
