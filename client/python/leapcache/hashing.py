"""Block keys and the block-hash chain, computed by the C++ client's ChainHashes (so they are the
service's keys bit for bit): h_i = SHA-256(h_{i-1} || tokens of block i as little-endian u32 ||
salt), one per full block."""

from __future__ import annotations

import array
import ctypes
import sys
from typing import List, Optional, Union

from . import _native
from .errors import error_for


class BlockKey(bytes):
    """A 32-byte block hash that knows where its checkpoint sits: after `blocks` blocks of
    `block_tokens` tokens (`tokens` in all). chain_hashes returns these; put_from takes the
    position from them. Compares and hashes as the plain bytes."""

    def __new__(cls, value: bytes, blocks: Optional[int] = None,
                block_tokens: Optional[int] = None):
        key = super().__new__(cls, value)
        if len(key) != _native.HASH_BYTES:
            raise ValueError(f"a block key is {_native.HASH_BYTES} bytes, got {len(key)}")
        key.blocks = blocks
        key.block_tokens = block_tokens
        key.tokens = blocks * block_tokens if blocks is not None and block_tokens else None
        return key

    def __repr__(self) -> str:
        return f"BlockKey({self.hex()[:16]}..., blocks={self.blocks}, tokens={self.tokens})"


def key_bytes(key, what: str = "key") -> bytes:
    """The 32 bytes of a key given as bytes-like or 64 hex digits."""
    if isinstance(key, str):
        try:
            key = bytes.fromhex(key)
        except ValueError:
            raise ValueError(f"{what} {key!r} is not hex") from None
    elif isinstance(key, (bytes, bytearray, memoryview)):
        key = bytes(key)
    else:
        raise TypeError(f"{what} must be 32 bytes (or 64 hex digits), got {type(key).__name__}")
    if len(key) != _native.HASH_BYTES:
        raise ValueError(f"{what} is {len(key)} bytes; block keys are {_native.HASH_BYTES}")
    return key


def _tokens_array(token_ids) -> array.array:
    """token_ids as a contiguous array of uint32; ValueError for ids outside [0, 2^32)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(token_ids, torch.Tensor):
        if token_ids.is_floating_point() or token_ids.dtype == torch.bool:
            raise TypeError(f"token ids must be integers, got {token_ids.dtype}")
        token_ids = token_ids.detach().cpu().reshape(-1).tolist()
    np = sys.modules.get("numpy")
    if np is not None and isinstance(token_ids, np.ndarray):
        if token_ids.dtype.kind not in "iu":
            raise TypeError(f"token ids must be integers, got {token_ids.dtype}")
        if token_ids.ndim != 1:
            raise ValueError(f"token ids must be one-dimensional, got shape {token_ids.shape}")
        if token_ids.size and (int(token_ids.min()) < 0 or int(token_ids.max()) >= 1 << 32):
            raise ValueError("token ids must be in [0, 2^32)")
        out = array.array("I")
        out.frombytes(token_ids.astype("<u4").tobytes())
        return out
    if isinstance(token_ids, (str, bytes)):
        raise TypeError("token ids must be a sequence of integers, not a string")
    # array("I") checks each id's type and range in C: fast for long prompts.
    try:
        return array.array("I", token_ids)
    except OverflowError as e:
        raise ValueError(f"token ids must be in [0, 2^32): {e}") from None
    except TypeError as e:
        raise TypeError(f"token ids must be integers: {e}") from None


def salt_bytes(salt: Union[bytes, str, None]) -> bytes:
    if salt is None:
        return b""
    if isinstance(salt, str):
        return salt.encode("utf-8")
    if isinstance(salt, (bytes, bytearray, memoryview)):
        return bytes(salt)
    raise TypeError(f"salt must be bytes or str, got {type(salt).__name__}")


def chain_hashes(token_ids, block_tokens: int, salt: Union[bytes, str, None] = b"") \
        -> List[BlockKey]:
    """The block-hash chain of `token_ids` (a list, numpy array or torch tensor of ints): one
    BlockKey per full block of `block_tokens` tokens, a trailing partial block ignored. `salt`
    (bytes, or str as UTF-8; at most 4 KiB) is mixed into every block: a cache salt, a LoRA id.
    InvalidArgumentError for a block size outside [1, 65536] or more than 65,536 blocks."""
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int):
        raise TypeError(f"block_tokens must be an int, got {type(block_tokens).__name__}")
    tokens = _tokens_array(token_ids)
    assert tokens.itemsize == 4
    extras = salt_bytes(salt)
    capacity = len(tokens) // block_tokens if block_tokens > 0 else 0
    out = (ctypes.c_uint8 * (capacity * _native.HASH_BYTES + 1))()
    n = ctypes.c_size_t(0)
    tokens_ptr = (ctypes.cast(tokens.buffer_info()[0], ctypes.POINTER(ctypes.c_uint32))
                  if len(tokens) else None)
    code = _native.lib().leapcache_chain_hashes(
        tokens_ptr, len(tokens), block_tokens, extras or None, len(extras), out, capacity,
        ctypes.byref(n))
    if code != 0:
        raise error_for(code, _native.last_error())
    raw = bytes(out)[: n.value * _native.HASH_BYTES]
    return [BlockKey(raw[i * 32:(i + 1) * 32], blocks=i + 1, block_tokens=block_tokens)
            for i in range(n.value)]


def crc32c(data) -> int:
    """CRC-32C of bytes-like `data`, as the service checks transfers."""
    b = bytes(data)
    return _native.lib().leapcache_crc32c(b or None, len(b))
