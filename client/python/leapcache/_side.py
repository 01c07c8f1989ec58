"""Side states: a namespace with a conv state (or extra bytes) stores, per (layer, head), the
recurrent state followed by the head's conv channels and extra bytes. The library moves those
units as one buffer; the caller keeps the states, the conv states and the extra bytes in
separate arrays. This module checks those arrays and moves the bytes between them and one
staging buffer of units: numpy for host memory, torch for CUDA memory (the data plane)."""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import List, Optional

from .arrays import ArrayInfo, inspect
from .types import Namespace


@dataclass
class SidePlan:
    """Where each part of a unit comes from or goes: the states' array (state_bytes of each
    unit), then the conv array and the extra array (None: not read back)."""

    units: int
    state_bytes: int
    parts: List[Optional[ArrayInfo]]  # states, conv, extra
    part_bytes: List[int]
    device: str  # "cpu" or "cuda": where the arrays and the staging buffer are

    @property
    def unit_bytes(self) -> int:
        return sum(self.part_bytes)

    @property
    def nbytes(self) -> int:
        return self.units * self.unit_bytes


def _checked(ns: Namespace, array, what: str, shape, dtype: str, writing: bool,
             device: str) -> ArrayInfo:
    info = inspect(array, what)
    if info.dtype != dtype:
        raise TypeError(f"{what} has dtype {info.dtype}; namespace {ns.id} keeps it as {dtype}")
    if info.shape != tuple(shape):
        raise ValueError(f"{what} has shape {list(info.shape)}; namespace {ns.id} takes "
                         f"{list(shape)}")
    if not info.contiguous:
        raise ValueError(f"{what} is not C-contiguous: pass a contiguous copy")
    if writing and not info.writable:
        raise ValueError(f"{what} is read-only")
    if info.device != device:
        raise ValueError(f"{what} is in {info.device} memory, the states in {device} memory")
    return info


def plan(ns: Namespace, states: ArrayInfo, conv, extra, h, writing: bool,
         device: str = "cpu") -> Optional[SidePlan]:
    """None when the units are the states alone (a namespace without a side state, or a compact
    array that already holds whole units); else how to split or join them. A put needs every
    part; a get may leave conv or extra None to drop them. `writing`: the arrays receive bytes
    (a get)."""
    if ns.side_bytes == 0:
        if conv is not None or extra is not None:
            raise ValueError(f"namespace {ns.id} has no conv state or extra bytes; conv= and "
                             "extra= do not apply")
        return None
    if states.dtype == "uint8" and states.shape == tuple(ns.units_shape(h)):
        if conv is not None or extra is not None:
            raise ValueError("the array holds whole units (their side states included): conv= "
                             "and extra= do not apply")
        return None  # whole units, as stored
    if ns.conv is None and conv is not None:
        raise ValueError(f"namespace {ns.id} has no conv state; conv= does not apply")
    if ns.extra_bytes == 0 and extra is not None:
        raise ValueError(f"namespace {ns.id} has no extra bytes; extra= does not apply")
    if not writing:
        if ns.conv is not None and conv is None:
            raise ValueError(f"namespace {ns.id} stores a conv state with every checkpoint: "
                             f"pass conv= ({list(ns.conv_shape(h))} {ns.conv.dtype})")
        if ns.extra_bytes > 0 and extra is None:
            raise ValueError(f"namespace {ns.id} stores {ns.extra_bytes} extra bytes per head: "
                             f"pass extra= ({list(ns.extra_shape(h))} uint8)")
    if device == "cuda" and "torch" not in sys.modules:
        raise TypeError("side states in CUDA memory are moved with torch: pass torch tensors")
    units = ns.layers * ns.head_count(h)
    conv_info = None if conv is None else _checked(ns, conv, "conv", ns.conv_shape(h),
                                                   ns.conv.dtype, writing, device)
    extra_info = None if extra is None else _checked(ns, extra, "extra", ns.extra_shape(h),
                                                     "uint8", writing, device)
    state_bytes = states.nbytes // units
    return SidePlan(units=units, state_bytes=state_bytes,
                    parts=[states, conv_info, extra_info],
                    part_bytes=[state_bytes, ns.conv_bytes, ns.extra_bytes], device=device)


def _rows(info: ArrayInfo, units: int):
    """The caller's bytes as a uint8 [units, bytes per unit] view: numpy over host memory, a
    torch view of a CUDA tensor."""
    if info.device == "cpu":
        import numpy as np
        buf = (ctypes.c_uint8 * info.nbytes).from_address(info.ptr)
        return np.ctypeslib.as_array(buf).reshape(units, info.nbytes // units)
    torch = sys.modules["torch"]
    if not isinstance(info.owner, torch.Tensor):
        raise TypeError("side states in CUDA memory are moved with torch: pass torch tensors")
    return info.owner.view(torch.uint8).reshape(units, info.nbytes // units)


def _assign(dst, src) -> None:
    if hasattr(dst, "copy_"):
        dst.copy_(src)
    else:
        dst[...] = src


def staging(p: SidePlan, device_index: int = -1):
    """A staging buffer for the plan's units: numpy for host memory, torch for CUDA memory."""
    if p.device == "cpu":
        import numpy as np
        return np.empty((p.units, p.unit_bytes), dtype=np.uint8)
    torch = sys.modules["torch"]
    return torch.empty((p.units, p.unit_bytes), dtype=torch.uint8,
                       device=torch.device("cuda", max(device_index, 0)))


def gather(p: SidePlan, stage) -> None:
    """`stage` ([units, unit_bytes]) filled from the caller's arrays (a put)."""
    at = 0
    for info, n in zip(p.parts, p.part_bytes):
        if n:
            _assign(stage[:, at:at + n], _rows(info, p.units))
        at += n


def scatter(p: SidePlan, stage) -> None:
    """The staged units' parts into the caller's arrays (a get); parts without an array are
    dropped."""
    at = 0
    for info, n in zip(p.parts, p.part_bytes):
        if n and info is not None:
            _assign(_rows(info, p.units), stage[:, at:at + n])
        at += n
