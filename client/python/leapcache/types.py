"""The values the package hands back and takes: namespaces and their storage formats, lookup
results, descriptions of transferred checkpoints, server stats, TLS settings. Plain dataclasses,
built from the library's structs in one place each."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from . import _native

KINDS = {"gdn": 1, "kda": 2}
CODECS = {"fp32": 1, "bf16": 2, "fp16": 3, "int-row": 4, "int-col": 5, "leap": 6}
# Dense encodings by the dtype name of the caller's array; uint8 arrays are compact v1 blobs.
DTYPE_COMPACT, DTYPE_FP32, DTYPE_BF16 = 0, 1, 2
DENSE_DTYPES = {"float32": DTYPE_FP32, "bfloat16": DTYPE_BF16}
LAYOUTS = {"kv": 1, "vk": 2}
# Conv-state element types by dtype name (types.proto ConvDType), and their sizes.
CONV_DTYPES = {"float32": 1, "bfloat16": 2, "float16": 3}
CONV_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
TRANSPORTS = {"inline": 1, "ucx": 2, "nccl": 3, "cuda_ipc": 4}

_NAME_OF = {
    "kind": {v: k for k, v in KINDS.items()},
    "codec": {v: k for k, v in CODECS.items()},
    "dtype": {0: "compact", 1: "float32", 2: "bfloat16"},
    "layout": {0: None, 1: "kv", 2: "vk"},
    "transport": {v: k for k, v in TRANSPORTS.items()},
}


def name_of(axis: str, value: int) -> str:
    return _NAME_OF[axis].get(value, f"unknown({value})")


@dataclass(frozen=True)
class TLSConfig:
    """TLS of the connection. All files are PEM; root_ca_file empty: gRPC's default roots;
    cert_file and key_file (both or neither) for mutual TLS; server_name when the server's
    certificate names another host than the target's."""

    root_ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""


@dataclass(frozen=True)
class StorageFormat:
    codec: str
    bits: int
    p: int
    r: int
    smoothing: bool

    @staticmethod
    def from_native(f) -> "StorageFormat":
        return StorageFormat(name_of("codec", f.codec), f.bits, f.p, f.r, bool(f.smoothing))


_FORMAT = re.compile(r"^(fp32|bf16|fp16|int-row|int-col|leap)(?:-?(\d+))?$")


def parse_format(fmt: str) -> Tuple[int, int]:
    """(codec, bits) of a format name: a codec ("leap", "fp32", "bf16", "fp16", "int-row",
    "int-col") optionally followed by its width, as the server labels formats ("leap8",
    "leap-6", "int-row8"). bits 0: the codec's default."""
    if not isinstance(fmt, str):
        raise TypeError(f"format must be a str such as 'leap8' or 'fp32', got "
                        f"{type(fmt).__name__}")
    m = _FORMAT.match(fmt)
    if m is None:
        raise ValueError(f"unknown format {fmt!r}: use fp32, bf16, fp16, int-row, int-col or "
                         "leap, optionally with the width (leap8, leap6, leap4)")
    return CODECS[m.group(1)], int(m.group(2) or 0)


@dataclass(frozen=True)
class ConvShape:
    """A linear layer's short-convolution state: `channels` per layer over all tensor-parallel
    ranks (a multiple of the heads, which split them evenly), each holding its last `width` =
    conv_kernel - 1 inputs, of `dtype` ("bfloat16", "float16" or "float32"). Per head: an array
    [channels / heads, width] in the engine's own channel order (types.proto, ConvShape)."""

    channels: int
    width: int
    dtype: str = "bfloat16"


@dataclass(frozen=True)
class Namespace:
    """A registered namespace: the model shape and format every checkpoint in it has. Pass it to
    the Client's calls; its shapes are what get_into and put_from check arrays against.

    A namespace with a conv state (and extra bytes) stores, per (layer, head), the recurrent
    state followed by its side state: the head's conv channels, then its extra bytes
    (side_bytes in all). The Client's calls take them as separate arrays (conv=, extra=)."""

    id: int
    tag: int
    fingerprint: str
    blob_bytes: int
    format_label: str
    layout_fingerprint: int
    tenant: str
    kind: str
    layers: int
    heads: int
    dk: int
    dv: int
    format: StorageFormat
    conv: Optional[ConvShape] = None
    extra_bytes: int = 0
    side_bytes: int = 0

    @property
    def conv_bytes(self) -> int:
        """One head's conv state in bytes (0 without one)."""
        if self.conv is None:
            return 0
        return self.conv.channels // self.heads * self.conv.width * \
            CONV_DTYPE_BYTES[self.conv.dtype]

    def conv_shape(self, heads=None) -> Tuple[int, int, int, int]:
        """Shape of the conv states of `heads`: [layers, heads, channels / total heads, width]
        of conv.dtype. ValueError for a namespace without one."""
        if self.conv is None:
            raise ValueError(f"namespace {self.id} has no conv state")
        return (self.layers, self.head_count(normalize_heads(heads, self.heads)),
                self.conv.channels // self.heads, self.conv.width)

    def extra_shape(self, heads=None) -> Tuple[int, int, int]:
        """Shape of the extra bytes of `heads`: [layers, heads, extra_bytes] uint8."""
        return (self.layers, self.head_count(normalize_heads(heads, self.heads)),
                self.extra_bytes)

    def units_shape(self, heads=None) -> Tuple[int, int, int]:
        """Shape of compact units as the data plane moves them: [layers, heads, blob_bytes +
        side_bytes] uint8, each blob followed by its side state."""
        return (self.layers, self.head_count(normalize_heads(heads, self.heads)),
                self.blob_bytes + self.side_bytes)

    def head_count(self, heads: Optional[Tuple[int, int]] = None) -> int:
        return self.heads if heads is None else heads[1] - heads[0]

    def state_shape(self, heads=None, layout: str = "kv") -> Tuple[int, int, int, int]:
        """Shape of dense states of `heads` ((begin, end); None: all): [layers, heads, dk, dv]
        for layout "kv", [layers, heads, dv, dk] for "vk"."""
        h = self.head_count(normalize_heads(heads, self.heads))
        return ((self.layers, h, self.dk, self.dv) if layout == "kv"
                else (self.layers, h, self.dv, self.dk))

    def compact_shape(self, heads=None) -> Tuple[int, int, int]:
        """Shape of compact v1 blobs of `heads`: [layers, heads, blob_bytes] uint8."""
        return (self.layers, self.head_count(normalize_heads(heads, self.heads)),
                self.blob_bytes)


def normalize_heads(heads, total: int) -> Optional[Tuple[int, int]]:
    """(begin, end) of a head range given as None (all), a (begin, end) pair or a range of
    step 1; ValueError unless 0 <= begin < end <= total."""
    if heads is None:
        return None
    if isinstance(heads, range):
        if heads.step != 1:
            raise ValueError(f"heads must be contiguous, got {heads}")
        b, e = heads.start, heads.stop
    else:
        try:
            b, e = heads
        except (TypeError, ValueError):
            raise TypeError(f"heads must be None, (begin, end) or a range, got {heads!r}") \
                from None
    if isinstance(b, bool) or isinstance(e, bool) or not isinstance(b, int) or \
            not isinstance(e, int):
        raise TypeError(f"heads must be integers, got {heads!r}")
    if not 0 <= b < e <= total:
        raise ValueError(f"heads [{b}, {e}) are not a non-empty range within the "
                         f"namespace's {total} heads")
    return (b, e)


def normalize_layers(layers, total: int) -> Optional[Tuple[int, int]]:
    """(begin, end) of a layer range given as None (every layer), a (begin, end) pair or a range
    of step 1; ValueError unless 0 <= begin < end <= total."""
    if layers is None:
        return None
    if isinstance(layers, range):
        if layers.step != 1:
            raise ValueError(f"layers must be contiguous, got {layers}")
        b, e = layers.start, layers.stop
    else:
        try:
            b, e = layers
        except (TypeError, ValueError):
            raise TypeError(f"layers must be None, (begin, end) or a range, got {layers!r}") \
                from None
    if isinstance(b, bool) or isinstance(e, bool) or not isinstance(b, int) or \
            not isinstance(e, int):
        raise TypeError(f"layers must be integers, got {layers!r}")
    if not 0 <= b < e <= total:
        raise ValueError(f"layers [{b}, {e}) are not a non-empty range within the "
                         f"namespace's {total} layers")
    return (b, e)


@dataclass(frozen=True)
class LookupResult:
    """The deepest stored checkpoint along a chain. False when nothing along it is stored.
    `key` is chain[index] (with its position), `tokens`/`blocks` where the checkpoint sits."""

    hit: bool
    index: int = -1
    key: Optional[bytes] = None
    tokens: int = 0
    blocks: int = 0

    def __bool__(self) -> bool:
        return self.hit


@dataclass(frozen=True)
class CheckpointInfo:
    """What a get wrote into the caller's array."""

    tokens: int
    blocks: int
    heads: Tuple[int, int]
    layers: int
    dk: int
    dv: int
    kind: str
    format: StorageFormat
    encoding: str            # "compact", "float32" or "bfloat16"
    layout: Optional[str]    # "kv" or "vk" for dense states
    blob_bytes: int
    state_bytes: int
    total_bytes: int
    crc32c: int              # data-plane gets only; 0 otherwise
    side_bytes: int = 0      # of every (layer, head): its conv state and extra bytes
    first_layer: int = 0     # the bytes hold layers [first_layer, first_layer + layers)

    @staticmethod
    def from_native(c, first_layer: int = 0) -> "CheckpointInfo":
        return CheckpointInfo(
            tokens=c.position.tokens, blocks=c.position.blocks,
            heads=(c.heads.begin, c.heads.end), layers=c.layers, dk=c.dk, dv=c.dv,
            kind=name_of("kind", c.kind), format=StorageFormat.from_native(c.format),
            encoding=name_of("dtype", c.encoding.dtype),
            layout=name_of("layout", c.encoding.layout) if c.encoding.dtype else None,
            blob_bytes=c.blob_bytes, state_bytes=c.state_bytes, total_bytes=c.total_bytes,
            crc32c=c.crc32c, side_bytes=c.side_bytes, first_layer=first_layer)


@dataclass(frozen=True)
class TierStats:
    name: str
    page_bytes: int
    capacity_bytes: int
    used_bytes: int
    reserved_bytes: int
    checkpoints: int


@dataclass(frozen=True)
class FormatMemoryStats:
    tier: str
    format: str
    blobs: int
    physical_bytes: int
    stored_bytes: int
    fp32_equivalent_bytes: int


@dataclass(frozen=True)
class Stats:
    """The server's Stats snapshot (proto/leapcache/v1/stats.proto documents each field);
    counters are attributes (stats.checkpoints, stats.puts_committed, ...)."""

    tiers: List[TierStats]
    memory: List[FormatMemoryStats]
    tenant: str
    counters: dict = field(default_factory=dict)

    def __getattr__(self, name):
        counters = self.__dict__.get("counters", {})
        if name in counters:
            return counters[name]
        raise AttributeError(name)

    @staticmethod
    def from_native(s) -> "Stats":
        tiers = [TierStats(t.name.decode(), t.page_bytes, t.capacity_bytes, t.used_bytes,
                           t.reserved_bytes, t.checkpoints)
                 for t in list(s.tiers)[:min(s.n_tiers, _native.MAX_STATS_TIERS)]]
        memory = [FormatMemoryStats(m.tier.decode(), m.format.decode(), m.blobs,
                                    m.physical_bytes, m.stored_bytes, m.fp32_equivalent_bytes)
                  for m in list(s.memory)[:min(s.n_memory, _native.MAX_STATS_FORMATS)]]
        counters = {n: getattr(s, n) for n in _native.STATS_COUNTERS + _native.STATS_TENANT}
        return Stats(tiers=tiers, memory=memory, tenant=s.tenant.decode(), counters=counters)
