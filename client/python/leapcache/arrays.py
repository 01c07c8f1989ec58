"""What the package needs to know of a caller's array before any call: where its bytes are, how
many, their dtype, shape and device, whether they are C-contiguous and writable.

Accepted: numpy arrays, torch tensors (CPU or CUDA, through data_ptr) and any object with
__cuda_array_interface__ (CuPy, Numba). Neither numpy nor torch is imported here: an array of
either can only exist once its module is loaded, so the check looks it up in sys.modules.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Tuple

# __cuda_array_interface__ / numpy typestr (kind + size) -> dtype name.
_TYPESTR = {
    "f4": "float32", "f2": "float16", "f8": "float64", "u1": "uint8", "i1": "int8",
    "u2": "uint16", "i2": "int16", "u4": "uint32", "i4": "int32", "u8": "uint64",
    "i8": "int64", "b1": "bool",
}


@dataclass(frozen=True)
class ArrayInfo:
    ptr: int
    nbytes: int
    shape: Tuple[int, ...]
    dtype: str        # "float32", "bfloat16", "uint8", ...
    device: str       # "cpu" or "cuda"
    device_index: int  # CUDA device; -1 for CPU memory
    contiguous: bool  # C order, no gaps
    writable: bool
    owner: Any        # the caller's object, kept alive while its bytes are in use


def _numpy_info(a) -> ArrayInfo:
    if a.dtype.byteorder == ">":
        raise TypeError(f"big-endian arrays are not accepted (dtype {a.dtype.str}); states are "
                        "little-endian")
    return ArrayInfo(ptr=a.__array_interface__["data"][0], nbytes=int(a.nbytes),
                     shape=tuple(int(d) for d in a.shape), dtype=a.dtype.name, device="cpu",
                     device_index=-1, contiguous=bool(a.flags.c_contiguous),
                     writable=bool(a.flags.writeable), owner=a)


def _torch_info(t, torch) -> ArrayInfo:
    if t.layout != torch.strided:
        raise TypeError(f"only dense (strided) tensors are accepted, got layout {t.layout}")
    dtype = str(t.dtype).replace("torch.", "")
    device = t.device.type
    if device not in ("cpu", "cuda"):
        raise ValueError(f"tensors on {t.device} are not accepted; use CPU or CUDA memory")
    return ArrayInfo(ptr=int(t.data_ptr()), nbytes=int(t.numel() * t.element_size()),
                     shape=tuple(int(d) for d in t.shape), dtype=dtype, device=device,
                     device_index=(t.device.index if t.device.index is not None else 0)
                     if device == "cuda" else -1,
                     contiguous=bool(t.is_contiguous()), writable=True, owner=t)


def _cuda_interface_info(obj, cai) -> ArrayInfo:
    shape = tuple(int(d) for d in cai["shape"])
    typestr = cai["typestr"]
    dtype = _TYPESTR.get(typestr[1:], typestr)
    if typestr[0] == ">":
        raise TypeError(f"big-endian arrays are not accepted (typestr {typestr})")
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 0
    count = 1
    for d in shape:
        count *= d
    contiguous = True
    strides = cai.get("strides")
    if strides is not None:
        expect = itemsize
        for d, s in zip(reversed(shape), reversed(strides)):
            if d > 1 and s != expect:
                contiguous = False
            expect *= d
    ptr, readonly = cai["data"]
    return ArrayInfo(ptr=int(ptr or 0), nbytes=count * itemsize, shape=shape, dtype=dtype,
                     device="cuda", device_index=-1, contiguous=contiguous,
                     writable=not readonly, owner=obj)


def inspect(obj, what: str) -> ArrayInfo:
    """The ArrayInfo of `obj`; TypeError naming `what` for anything that is not an array."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _torch_info(obj, torch)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        return _numpy_info(obj)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _cuda_interface_info(obj, cai)
    raise TypeError(f"{what} must be a numpy array or a torch tensor (or expose "
                    f"__cuda_array_interface__), got {type(obj).__name__}")
