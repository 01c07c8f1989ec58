"""The ctypes binding of libleapcache_c (client/c_api/leapcache_c.h): the library's loading, its
structs and its function prototypes. Nothing else in the package touches ctypes' declarations.

The library is loaded with ctypes.CDLL, which releases the GIL for the whole of every foreign
call: a Python thread blocked on the network never stops the others. The library never calls
back into Python.

Where the library comes from, first match wins: $LEAPCACHE_C_LIBRARY (a path), else
libleapcache_c.so beside this file (the staged and installed package).
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p)

ABI_VERSION = 1
HASH_BYTES = 32
MAX_STATS_TIERS = 8
MAX_STATS_FORMATS = 64


class ClientOptions(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("target", c_char_p),
        ("tls", c_int32),
        ("tls_root_ca_file", c_char_p),
        ("tls_client_cert_file", c_char_p),
        ("tls_client_key_file", c_char_p),
        ("tls_server_name", c_char_p),
        ("token", c_char_p),
        ("allow_token_without_tls", c_int32),
        ("connect_timeout_ms", c_int64),
        ("rpc_timeout_ms", c_int64),
        ("transfer_timeout_ms", c_int64),
        ("chunk_bytes", c_uint64),
        ("max_message_bytes", c_uint64),
    ]


class StorageFormat(Structure):
    _fields_ = [("codec", c_int32), ("bits", c_int32), ("p", c_int32), ("r", c_int32),
                ("smoothing", c_int32)]


class NamespaceSpec(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("tenant", c_char_p),
        ("linear_layers", c_int32),
        ("total_heads", c_int32),
        ("dk", c_int32),
        ("dv", c_int32),
        ("kind", c_int32),
        ("format", StorageFormat),
        ("flops_per_token", c_double),
        ("conv_channels", c_int32),
        ("conv_width", c_int32),
        ("conv_dtype", c_int32),
        ("extra_bytes", c_int32),
    ]


class NamespaceInfo(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("id", c_uint32),
        ("layout_fingerprint", c_uint32),
        ("tag", c_uint64),
        ("blob_bytes", c_uint64),
        ("fingerprint", c_char * 72),
        ("format_label", c_char * 64),
        ("side_bytes", c_uint64),
    ]


class HeadRange(Structure):
    _fields_ = [("begin", c_int32), ("end", c_int32)]


class LayerRange(Structure):
    _fields_ = [("begin", c_int32), ("end", c_int32)]


class Position(Structure):
    _fields_ = [("tokens", c_int64), ("blocks", c_int64)]


class Encoding(Structure):
    _fields_ = [("dtype", c_int32), ("layout", c_int32)]


class LookupResult(Structure):
    _fields_ = [("struct_size", c_uint32), ("hit", c_int32), ("index", c_int32),
                ("position", Position)]


class LookupRequest(Structure):
    _fields_ = [("struct_size", c_uint32), ("namespace_id", c_uint32), ("chain", c_void_p),
                ("chain_len", c_size_t), ("heads", POINTER(HeadRange)), ("max_depth", c_int32),
                ("block_tokens", c_int64)]


class EngineGet(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("namespace_id", c_uint32),
        ("hash", c_void_p),
        ("heads", POINTER(HeadRange)),
        ("layers", POINTER(LayerRange)),
        ("encoding", POINTER(Encoding)),
        ("buffer_id", c_uint64),
        ("offset", c_uint64),
    ]


class PutTarget(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("namespace_id", c_uint32),
        ("hash", c_uint8 * HASH_BYTES),
        ("position", Position),
        ("heads", HeadRange),
        ("ttl_ms", c_int64),
    ]


class CheckpointInfo(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("position", Position),
        ("heads", HeadRange),
        ("layers", c_int32),
        ("dk", c_int32),
        ("dv", c_int32),
        ("kind", c_int32),
        ("format", StorageFormat),
        ("encoding", Encoding),
        ("blob_bytes", c_uint64),
        ("state_bytes", c_uint64),
        ("total_bytes", c_uint64),
        ("crc32c", c_uint32),
        ("side_bytes", c_uint64),
    ]


class TierStats(Structure):
    _fields_ = [("name", c_char * 32), ("page_bytes", c_uint64), ("capacity_bytes", c_uint64),
                ("used_bytes", c_uint64), ("reserved_bytes", c_uint64),
                ("checkpoints", c_uint64)]


class FormatMemoryStats(Structure):
    _fields_ = [("tier", c_char * 32), ("format", c_char * 32), ("blobs", c_uint64),
                ("physical_bytes", c_uint64), ("stored_bytes", c_uint64),
                ("fp32_equivalent_bytes", c_uint64)]


# The scalar counters of leapcache_stats, in the header's order.
STATS_COUNTERS = (
    "namespaces", "checkpoints", "pending_puts", "leases", "pinned",
    "lookups", "lookup_hits", "lookup_misses", "lookup_hit_tokens", "lookup_miss_tokens",
    "puts_reserved", "puts_refused", "puts_committed", "puts_rejected", "puts_aborted",
    "puts_expired",
    "gets", "get_hits", "get_misses", "deletes",
    "evictions", "spills", "promotions", "bytes_in", "bytes_out",
)
STATS_TENANT = ("tenant_namespaces", "tenant_bytes", "tenant_pinned_bytes",
                "tenant_pending_puts", "quota_bytes", "quota_pinned_bytes",
                "quota_pending_puts", "quota_namespaces")


class Stats(Structure):
    _fields_ = ([("struct_size", c_uint32), ("n_tiers", c_uint32), ("n_memory", c_uint32),
                 ("tiers", TierStats * MAX_STATS_TIERS),
                 ("memory", FormatMemoryStats * MAX_STATS_FORMATS)]
                + [(name, c_uint64) for name in STATS_COUNTERS]
                + [("tenant", c_char * 264)]
                + [(name, c_uint64) for name in STATS_TENANT])


class AttachOptions(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("name", c_char_p),
        ("host", c_char_p),
        ("pid", c_uint32),
        ("gpu_uuid", c_char_p),
        ("gpu_index", c_int32),
        ("transports", POINTER(c_int32)),
        ("n_transports", c_size_t),
        ("ucx_transports", c_char_p),
        ("session_ttl_ms", c_int64),
    ]


class DecodeOptions(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("namespace_id", c_uint32),
        ("namespace_tag", c_uint64),
        ("heads", HeadRange),
        ("slots", c_int32),
        ("l2norm_qk", c_int32),
        ("scale", c_float),
        ("step_channel", c_int32),
    ]


class DecodeInfo(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("id", c_uint64),
        ("layers", c_int32),
        ("heads", HeadRange),
        ("dk", c_int32),
        ("dv", c_int32),
        ("kind", c_int32),
        ("backend", c_char * 16),
        ("state_bytes", c_uint64),
    ]


class DecodeStep(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("layer", c_int32),
        ("slots", c_void_p),
        ("batch", c_size_t),
        ("dtype", c_int32),
        ("q", c_void_p),
        ("k", c_void_p),
        ("v", c_void_p),
        ("g", c_void_p),
        ("beta", c_void_p),
        ("out_dtype", c_int32),
    ]


class DecodeBufferStep(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("layer", c_int32),
        ("slots", c_void_p),
        ("batch", c_size_t),
        ("dtype", c_int32),
        ("out_dtype", c_int32),
        ("buffer_id", c_uint64),
        ("input_offset", c_uint64),
        ("output_offset", c_uint64),
    ]


def new(struct_type, **fields):
    """An instance of a struct that carries struct_size, with it set."""
    s = struct_type(**fields)
    s.struct_size = ctypes.sizeof(struct_type)
    return s


_CLIENT = c_void_p  # leapcache_client*
_ENGINE = c_void_p  # leapcache_engine*
_DECODE = c_void_p  # leapcache_decode_session*
_HASH = POINTER(c_uint8)

# name: (restype, argtypes)
_PROTOTYPES = {
    "leapcache_abi_version": (c_uint32, []),
    "leapcache_last_error": (c_char_p, []),
    "leapcache_transport_built": (c_int32, [c_int32]),
    "leapcache_client_create": (c_int, [POINTER(ClientOptions), POINTER(_CLIENT)]),
    "leapcache_client_destroy": (None, [_CLIENT]),
    "leapcache_check_health": (c_int, [_CLIENT, c_char_p, POINTER(c_int32)]),
    "leapcache_format_preset": (c_int, [c_int32, c_int32, POINTER(StorageFormat)]),
    "leapcache_register_namespace": (c_int, [_CLIENT, POINTER(NamespaceSpec),
                                             POINTER(NamespaceInfo)]),
    "leapcache_chain_hashes": (c_int, [POINTER(c_uint32), c_size_t, c_int64, c_void_p, c_size_t,
                                       c_void_p, c_size_t, POINTER(c_size_t)]),
    "leapcache_crc32c": (c_uint32, [c_void_p, c_size_t]),
    "leapcache_lookup": (c_int, [_CLIENT, c_uint32, c_void_p, c_size_t, POINTER(HeadRange),
                                 c_int32, c_int64, POINTER(LookupResult)]),
    "leapcache_lookup_batch": (c_int, [_CLIENT, POINTER(LookupRequest), c_size_t,
                                       POINTER(LookupResult), POINTER(c_int32)]),
    "leapcache_batch_error": (c_char_p, [c_size_t]),
    "leapcache_engine_lookup_batch": (c_int, [_ENGINE, POINTER(LookupRequest), c_size_t,
                                              POINTER(LookupResult), POINTER(c_int32)]),
    "leapcache_get_into": (c_int, [_CLIENT, c_uint32, c_void_p, POINTER(HeadRange),
                                   POINTER(Encoding), c_void_p, c_uint64,
                                   POINTER(CheckpointInfo)]),
    "leapcache_get_layers_into": (c_int, [_CLIENT, c_uint32, c_void_p, POINTER(HeadRange),
                                          POINTER(LayerRange), POINTER(Encoding), c_void_p,
                                          c_uint64, POINTER(CheckpointInfo)]),
    "leapcache_put_from": (c_int, [_CLIENT, POINTER(PutTarget), POINTER(Encoding), c_void_p,
                                   c_uint64]),
    "leapcache_delete": (c_int, [_CLIENT, c_uint32, c_void_p]),
    "leapcache_pin": (c_int, [_CLIENT, c_uint32, c_void_p]),
    "leapcache_unpin": (c_int, [_CLIENT, c_uint32, c_void_p]),
    "leapcache_stats_get": (c_int, [_CLIENT, POINTER(Stats)]),
    "leapcache_engine_attach": (c_int, [POINTER(ClientOptions), POINTER(AttachOptions),
                                        POINTER(_ENGINE)]),
    "leapcache_engine_destroy": (None, [_ENGINE]),
    "leapcache_engine_transport": (c_int32, [_ENGINE]),
    "leapcache_engine_session_id": (c_uint64, [_ENGINE]),
    "leapcache_engine_client": (_CLIENT, [_ENGINE]),
    "leapcache_engine_register_buffer": (c_int, [_ENGINE, c_void_p, c_uint64, c_int32,
                                                 POINTER(c_uint64)]),
    "leapcache_engine_release_buffer": (c_int, [_ENGINE, c_uint64]),
    "leapcache_engine_get_into": (c_int, [_ENGINE, c_uint32, c_void_p, POINTER(HeadRange),
                                          POINTER(Encoding), c_uint64, c_uint64,
                                          POINTER(CheckpointInfo)]),
    "leapcache_engine_get_layers_into": (c_int, [_ENGINE, c_uint32, c_void_p, POINTER(HeadRange),
                                                 POINTER(LayerRange), POINTER(Encoding),
                                                 c_uint64, c_uint64, POINTER(CheckpointInfo)]),
    "leapcache_engine_get_batch": (c_int, [_ENGINE, POINTER(EngineGet), c_size_t,
                                           POINTER(CheckpointInfo), POINTER(c_int32)]),
    "leapcache_engine_put_from": (c_int, [_ENGINE, POINTER(PutTarget), POINTER(Encoding),
                                          c_uint64, c_uint64, c_uint64]),
    "leapcache_engine_detach": (c_int, [_ENGINE]),
    "leapcache_decode_open": (c_int, [POINTER(ClientOptions), POINTER(DecodeOptions),
                                      POINTER(_DECODE)]),
    "leapcache_decode_destroy": (None, [_DECODE]),
    "leapcache_decode_info_get": (c_int, [_DECODE, POINTER(DecodeInfo)]),
    "leapcache_decode_input_bytes": (c_uint64, [POINTER(DecodeInfo), c_size_t, c_int32]),
    "leapcache_decode_output_bytes": (c_uint64, [POINTER(DecodeInfo), c_size_t, c_int32]),
    "leapcache_decode_step_host": (c_int, [_DECODE, POINTER(DecodeStep), c_void_p, c_uint64]),
    "leapcache_decode_step_in_buffer": (c_int, [_DECODE, _ENGINE, POINTER(DecodeBufferStep)]),
    "leapcache_decode_stepping_through_channel": (c_int32, [_DECODE]),
    "leapcache_decode_reset": (c_int, [_DECODE, c_int32]),
    "leapcache_decode_load": (c_int, [_DECODE, c_int32, c_void_p, POINTER(Position)]),
    "leapcache_decode_commit": (c_int, [_DECODE, c_int32, c_void_p, POINTER(Position)]),
    "leapcache_decode_close": (c_int, [_DECODE]),
}

_lock = threading.Lock()
_lib = None


def library_path() -> str:
    explicit = os.environ.get("LEAPCACHE_C_LIBRARY")
    if explicit:
        return explicit
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libleapcache_c.so")


def lib():
    """The loaded library, its prototypes declared and its ABI version checked."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = library_path()
        if not os.path.exists(path):
            raise ImportError(
                f"libleapcache_c.so not found at {path}: install the package from the build "
                "tree (build/client/python) or set LEAPCACHE_C_LIBRARY to the library's path")
        loaded = ctypes.CDLL(path)
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(loaded, name)
            fn.restype = restype
            fn.argtypes = argtypes
        version = loaded.leapcache_abi_version()
        if version != ABI_VERSION:
            raise ImportError(f"{path} has C ABI version {version}; this package needs "
                              f"{ABI_VERSION}")
        _lib = loaded
        return _lib


def batch_error(i: int) -> str:
    """Item i's message of this thread's last batch call."""
    raw = lib().leapcache_batch_error(i)
    return raw.decode("utf-8", "replace") if raw else ""


def last_error() -> str:
    """This thread's last error message (the library keeps one per thread)."""
    raw = lib().leapcache_last_error()
    return raw.decode("utf-8", "replace") if raw else ""
