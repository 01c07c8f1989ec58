"""Client: one connection to a leapcache server and the calls of the C++ Client over it
(leapcache/client.h): namespaces, lookups, gets into and puts from the caller's arrays, delete,
pin, unpin, stats, health; attach() for the data plane, open_decode() for attached decode.

    with leapcache.Client("127.0.0.1:7470") as c:
        ns = c.register_namespace("tenant-a", kind="gdn", layers=2, heads=4, format="leap8")
        chain = leapcache.chain_hashes(prompt_ids, block_tokens=256)
        c.put_from(ns, chain[-1], states)              # float32 [layers, heads, dk, dv]
        hit = c.lookup(ns, chain)
        if hit:
            c.get_into(ns, hit.key, out)               # out: same shape, float32 or bfloat16

Every call blocks its thread only: the GIL is released while the library runs, and one Client
may be used from many threads at once. Arguments are checked before anything is sent (TypeError,
ValueError); the server's refusals raise the LeapcacheError subclass of their gRPC code.
"""

from __future__ import annotations

import ctypes
from typing import List, Optional, Sequence, Union

from . import _checks, _native, _side
from ._handle import Handle
from .errors import ClientClosedError, LeapcacheError, error_for
from .hashing import BlockKey, key_bytes
from .arrays import inspect
from .types import (CONV_DTYPES, KINDS, CheckpointInfo, ConvShape, LookupResult, Namespace,
                    StorageFormat, Stats, TLSConfig, parse_format)


def _check(code: int) -> None:
    if code != 0:
        raise error_for(code, _native.last_error())


def _per_item(values, n: int, name: str) -> list:
    """A batch's per-item arrays: None for every item, or one (possibly None) per item."""
    if values is None:
        return [None] * n
    if len(values) != n:
        raise ValueError(f"{n} keys but {len(values)} {name}")
    return list(values)


def _lookup_batch(handle, call, namespace, chains, heads, max_depth, block_tokens
                  ) -> List[Union[LookupResult, LeapcacheError]]:
    """Client.lookup_batch's body, for any C entry point of leapcache_lookup_batch's shape
    (`call`, on `handle`'s native pointer): checks, the call, each result or error."""
    ns = _checks.namespace(namespace)
    h = _checks.heads(ns, heads)
    if not 1 <= len(chains) <= 4096:
        raise ValueError(f"a batch holds 1..4096 chains, got {len(chains)}")
    depths = [max_depth] * len(chains) if isinstance(max_depth, int) else list(max_depth)
    if len(depths) != len(chains):
        raise ValueError(f"{len(chains)} chains but {len(depths)} max_depth values")
    hr = _checks.head_range(h)
    items = []
    for i, (chain, depth) in enumerate(zip(chains, depths)):
        keys = [key_bytes(k, f"chains[{i}][{j}]") for j, k in enumerate(chain)]
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"max_depth[{i}] must be an int >= 0, got {depth!r}")
        tokens = block_tokens
        if tokens is None:
            first = chain[0] if len(chain) else None
            tokens = getattr(first, "block_tokens", None) or 0
        items.append((chain, keys, b"".join(keys), depth, tokens))
    n = len(items)
    requests = (_native.LookupRequest * n)()
    results = (_native.LookupResult * n)()
    codes = (ctypes.c_int32 * n)()
    buffers = []  # keeps each chain's bytes alive through the call
    for i, (_, keys, raw, depth, tokens) in enumerate(items):
        buf = ctypes.create_string_buffer(raw, len(raw)) if raw else None
        buffers.append(buf)
        r = requests[i]
        r.struct_size = ctypes.sizeof(_native.LookupRequest)
        r.namespace_id = ns.id
        r.chain = ctypes.cast(buf, ctypes.c_void_p) if buf is not None else None
        r.chain_len = len(keys)
        r.heads = ctypes.pointer(hr) if hr else None
        r.max_depth = depth
        r.block_tokens = tokens
        results[i].struct_size = ctypes.sizeof(_native.LookupResult)
    with handle.use() as c:
        _check(call(c, requests, n, results, codes))
        messages = [_native.batch_error(i) if codes[i] != 0 else "" for i in range(n)]
    out: List[Union[LookupResult, LeapcacheError]] = []
    for i, (chain, keys, _, _, tokens) in enumerate(items):
        if codes[i] != 0:
            out.append(error_for(codes[i], messages[i]))
            continue
        res = results[i]
        if not res.hit:
            out.append(LookupResult(hit=False))
            continue
        hit = chain[res.index]
        key = hit if isinstance(hit, BlockKey) else BlockKey(keys[res.index], res.position.blocks,
                                                            tokens or None)
        out.append(LookupResult(hit=True, index=res.index, key=key, tokens=res.position.tokens,
                                blocks=res.position.blocks))
    return out


def _seconds_ms(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be positive seconds, got {value!r}")
    return max(1, int(round(value * 1000)))


def _text(value, name: str) -> Optional[bytes]:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value.encode("utf-8")


class _Options:
    """The library's leapcache_client_options, with the bytes its pointers refer to kept alive
    (an Engine attaches with the same options as its Client)."""

    def __init__(self, target: str, tls, token, allow_token_without_tls: bool,
                 connect_timeout, rpc_timeout, transfer_timeout, chunk_bytes,
                 max_message_bytes):
        if not isinstance(target, str) or not target:
            raise TypeError(f"target must be 'host:port', got {target!r}")
        if tls is True:
            tls = TLSConfig()
        elif tls is None or tls is False:
            tls = None
        elif not isinstance(tls, TLSConfig):
            raise TypeError(f"tls must be None, True or a TLSConfig, got {type(tls).__name__}")
        self._keep = []
        o = _native.new(_native.ClientOptions)
        o.target = self._str(target, "target")
        o.tls = 1 if tls is not None else 0
        if tls is not None:
            o.tls_root_ca_file = self._str(tls.root_ca_file, "tls.root_ca_file")
            o.tls_client_cert_file = self._str(tls.cert_file, "tls.cert_file")
            o.tls_client_key_file = self._str(tls.key_file, "tls.key_file")
            o.tls_server_name = self._str(tls.server_name, "tls.server_name")
        o.token = self._str(token, "token")
        o.allow_token_without_tls = 1 if allow_token_without_tls else 0
        o.connect_timeout_ms = _seconds_ms("connect_timeout", connect_timeout)
        o.rpc_timeout_ms = _seconds_ms("rpc_timeout", rpc_timeout)
        o.transfer_timeout_ms = _seconds_ms("transfer_timeout", transfer_timeout)
        for name, value in (("chunk_bytes", chunk_bytes), ("max_message_bytes",
                                                           max_message_bytes)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value <= 0):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        o.chunk_bytes = chunk_bytes or 0
        o.max_message_bytes = max_message_bytes or 0
        self.native = o
        self.target = target

    def _str(self, value, name):
        b = _text(value, name)
        self._keep.append(b)
        return b


class Client:
    """A connection to the server at `target` ("host:port").

    tls: None (plaintext), True (TLS, gRPC's default roots) or a TLSConfig (CA, client
      certificate and key for mutual TLS, server name).
    token: bearer token of the caller's tenant; sent over TLS only, unless
      allow_token_without_tls and the target is a loopback address.
    Timeouts in seconds: connecting (UnavailableError after it), each unary call, each
    transfer. chunk_bytes / max_message_bytes: None keeps the C++ client's 1 MiB / 8 MiB.
    """

    def __init__(self, target: str = "127.0.0.1:7470", *, tls: Union[None, bool, TLSConfig] = None,
                 token: Optional[str] = None, allow_token_without_tls: bool = False,
                 connect_timeout: float = 10.0, rpc_timeout: float = 10.0,
                 transfer_timeout: float = 120.0, chunk_bytes: Optional[int] = None,
                 max_message_bytes: Optional[int] = None):
        self._options = _Options(target, tls, token, allow_token_without_tls, connect_timeout,
                                 rpc_timeout, transfer_timeout, chunk_bytes, max_message_bytes)
        lib = _native.lib()
        ptr = ctypes.c_void_p()
        _check(lib.leapcache_client_create(ctypes.byref(self._options.native), ctypes.byref(ptr)))
        self._handle = Handle(ptr.value, lib.leapcache_client_destroy, "Client")

    @classmethod
    def _borrowed(cls, ptr: int, options: "_Options") -> "Client":
        """A Client over an engine's own connection (leapcache_engine_client), closed with it."""
        self = cls.__new__(cls)
        self._options = options
        self._handle = Handle(ptr, None, "Client")
        return self

    # ---- lifetime ----

    @property
    def target(self) -> str:
        return self._options.target

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def close(self) -> None:
        """Waits for calls in flight, then closes the connection; later calls raise
        ClientClosedError. Idempotent."""
        self._handle.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None:
            try:
                handle.close()
            except Exception:  # interpreter shutdown: the library may be gone already
                pass

    def __repr__(self) -> str:
        return f"leapcache.Client({self.target!r}{', closed' if self.closed else ''})"

    # ---- server ----

    def health(self, service: str = "") -> bool:
        """grpc.health.v1 Check: True iff the server (or `service`) is SERVING."""
        serving = ctypes.c_int32(0)
        svc = _text(service, "service")
        with self._handle.use() as c:
            _check(_native.lib().leapcache_check_health(c, svc, ctypes.byref(serving)))
        return bool(serving.value)

    def stats(self) -> Stats:
        out = _native.new(_native.Stats)
        with self._handle.use() as c:
            _check(_native.lib().leapcache_stats_get(c, ctypes.byref(out)))
        return Stats.from_native(out)

    # ---- namespaces ----

    def register_namespace(self, tenant: str, *, layers: int, heads: int, kind: str = "gdn",
                           dk: int = 128, dv: int = 128, format: str = "leap8",
                           p: Optional[int] = None, r: Optional[int] = None,
                           smoothing: Optional[bool] = None,
                           flops_per_token: float = 0.0, conv: Optional[ConvShape] = None,
                           extra_bytes: int = 0) -> Namespace:
        """Registers (idempotently) the namespace of a model's linear-attention states:
        `layers` linear layers of `heads` heads (all tensor-parallel ranks together) of dk x dv
        states of `kind` ("gdn" or "kda"), stored in `format` ("leap8", "leap6", "leap4",
        "fp32", "bf16", "fp16", "int-row8", ...); p, r, smoothing override the format's
        documented settings. `conv`: the layers' short-convolution state, stored with every
        checkpoint as given (e.g. vLLM's GDN: ConvShape(2 * key_heads * dk + heads * dv,
        conv_kernel - 1, "bfloat16")); extra_bytes: opaque bytes per (layer, head) beside it.
        Either makes another namespace than the same model without it."""
        if not isinstance(tenant, str) or not tenant:
            raise TypeError(f"tenant must be a non-empty str, got {tenant!r}")
        if kind not in KINDS:
            raise ValueError(f"kind must be 'gdn' or 'kda', got {kind!r}")
        for name, value in (("layers", layers), ("heads", heads), ("dk", dk), ("dv", dv)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {value!r}")
        codec, bits = parse_format(format)
        lib = _native.lib()
        fmt = _native.StorageFormat()
        _check(lib.leapcache_format_preset(codec, bits, ctypes.byref(fmt)))
        for name, value in (("p", p), ("r", r)):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"{name} must be an int, got {value!r}")
                setattr(fmt, name, value)
        if smoothing is not None:
            fmt.smoothing = 1 if smoothing else 0
        if conv is not None and not isinstance(conv, ConvShape):
            raise TypeError(f"conv must be a leapcache.ConvShape, got {type(conv).__name__}")
        if conv is not None and conv.dtype not in CONV_DTYPES:
            raise ValueError(f"conv.dtype must be one of {sorted(CONV_DTYPES)}, got "
                             f"{conv.dtype!r}")
        for name, value in (("extra_bytes", extra_bytes),) + (
                (("conv.channels", conv.channels), ("conv.width", conv.width)) if conv else ()):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {value!r}")
        tenant_b = tenant.encode("utf-8")
        spec = _native.new(_native.NamespaceSpec, tenant=tenant_b, linear_layers=layers,
                           total_heads=heads, dk=dk, dv=dv, kind=KINDS[kind], format=fmt,
                           flops_per_token=float(flops_per_token),
                           conv_channels=conv.channels if conv else 0,
                           conv_width=conv.width if conv else 0,
                           conv_dtype=CONV_DTYPES[conv.dtype] if conv else 0,
                           extra_bytes=extra_bytes)
        info = _native.new(_native.NamespaceInfo)
        with self._handle.use() as c:
            _check(lib.leapcache_register_namespace(c, ctypes.byref(spec), ctypes.byref(info)))
        return Namespace(id=info.id, tag=info.tag, fingerprint=info.fingerprint.decode(),
                         blob_bytes=info.blob_bytes, format_label=info.format_label.decode(),
                         layout_fingerprint=info.layout_fingerprint, tenant=tenant, kind=kind,
                         layers=layers, heads=heads, dk=dk, dv=dv,
                         format=StorageFormat.from_native(fmt), conv=conv,
                         extra_bytes=extra_bytes, side_bytes=info.side_bytes)

    # ---- lookups ----

    def lookup(self, namespace: Namespace, chain: Sequence[bytes], *, heads=None,
               max_depth: int = 0, block_tokens: Optional[int] = None) -> LookupResult:
        """The deepest checkpoint along `chain` (block keys, chain[i] ending block i + 1) that
        holds `heads` ((begin, end); None: all). max_depth caps the depth (0: whole chain), e.g.
        at the engine's own attention-KV hit. block_tokens defaults to the keys' own."""
        ns = _checks.namespace(namespace)
        h = _checks.heads(ns, heads)
        keys = [key_bytes(k, f"chain[{i}]") for i, k in enumerate(chain)]
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
            raise ValueError(f"max_depth must be an int >= 0, got {max_depth!r}")
        if block_tokens is None:
            first = chain[0] if len(chain) else None
            block_tokens = getattr(first, "block_tokens", None) or 0
        raw = b"".join(keys)
        out = _native.new(_native.LookupResult)
        hr = _checks.head_range(h)
        with self._handle.use() as c:
            _check(_native.lib().leapcache_lookup(
                c, ns.id, raw or None, len(keys), ctypes.byref(hr) if hr else None, max_depth,
                block_tokens, ctypes.byref(out)))
        if not out.hit:
            return LookupResult(hit=False)
        hit = chain[out.index]
        key = hit if isinstance(hit, BlockKey) else BlockKey(keys[out.index], out.position.blocks,
                                                            block_tokens or None)
        return LookupResult(hit=True, index=out.index, key=key, tokens=out.position.tokens,
                            blocks=out.position.blocks)

    def lookup_batch(self, namespace: Namespace, chains: Sequence[Sequence[bytes]], *,
                     heads=None, max_depth: Union[int, Sequence[int]] = 0,
                     block_tokens: Optional[int] = None
                     ) -> List[Union[LookupResult, LeapcacheError]]:
        """lookup for each chain of `chains` (1..4096 of them: a scheduler step's prompts) in
        one call. max_depth: one cap for all chains or one per chain (0: whole chain). Every
        argument is checked before the call (TypeError/ValueError, nothing sent); then each
        item's result is its LookupResult or the LeapcacheError that lookup alone would have
        raised, in order."""
        return _lookup_batch(self._handle, _native.lib().leapcache_lookup_batch, namespace,
                             chains, heads, max_depth, block_tokens)

    # ---- gets and puts ----

    def get_into(self, namespace: Namespace, key, out, *, heads=None, layers=None,
                 layout: Optional[str] = None, conv=None, extra=None) -> CheckpointInfo:
        """Writes the checkpoint at `key` into `out` (host memory, C-contiguous): uint8
        [layers, heads, blob_bytes] receives the compact v1 blobs byte-exact; float32 or
        bfloat16 [layers, heads, dk, dv] (layout "kv", the default) or [layers, heads, dv, dk]
        ("vk") receives dense states decoded by the service. `heads` (begin, end) reads a head
        range of every layer. For a namespace with a conv state, `conv` ([layers, heads,
        channels / heads, width] of its dtype) receives the conv states byte-exact and `extra`
        ([layers, heads, extra_bytes] uint8) the extra bytes; None drops them (numpy needed).
        `layers` (begin, end) reads those layers only: every shape above then counts them.
        NotFoundError if the key (or a head) is not stored."""
        ns = _checks.namespace(namespace)
        h = _checks.heads(ns, heads)
        lr = _checks.layers(ns, layers)
        raw = key_bytes(key)
        shaped = _checks.of_layers(ns, lr)
        info, enc = _checks.states(shaped, out, "out", h, layout, writing=True)
        side = _side.plan(shaped, info, conv, extra, h, writing=True)
        return self._get(ns, raw, h, enc, info, side, lr)

    def _get(self, ns, raw, h, enc, info, side=None, lr=None) -> CheckpointInfo:
        result = _native.new(_native.CheckpointInfo)
        hr = _checks.head_range(h)
        layer_range = _checks.layer_range(lr)
        stage = None if side is None else _side.staging(side)
        target = info if stage is None else inspect(stage, "staging")
        with self._handle.use() as c:
            _check(_native.lib().leapcache_get_layers_into(
                c, ns.id, raw, ctypes.byref(hr) if hr else None,
                ctypes.byref(layer_range) if layer_range else None, ctypes.byref(enc),
                target.ptr, target.nbytes, ctypes.byref(result)))
        if stage is not None:
            _side.scatter(side, stage)
        return CheckpointInfo.from_native(result, 0 if lr is None else lr[0])

    def get(self, namespace: Namespace, key, *, heads=None, layers=None, dtype: str = "float32",
            layout: str = "kv"):
        """The checkpoint at `key` (of `layers`, default all) as a new numpy array: dense
        states of `dtype` ("float32"; "uint8" for the compact blobs) in `layout`. Needs numpy."""
        import numpy as np
        ns = _checks.namespace(namespace)
        h = _checks.heads(ns, heads)
        shaped = _checks.of_layers(ns, _checks.layers(ns, layers))
        if dtype == "uint8":
            out = np.empty(shaped.compact_shape(h), dtype=np.uint8)
            self.get_into(ns, key, out, heads=heads, layers=layers)
        elif dtype == "float32":
            out = np.empty(shaped.state_shape(h, layout), dtype=np.float32)
            self.get_into(ns, key, out, heads=heads, layers=layers, layout=layout)
        else:
            raise ValueError(f"dtype must be 'float32' or 'uint8' (numpy has no bfloat16; use "
                             f"get_into with a torch.bfloat16 tensor), got {dtype!r}")
        return out

    def put_from(self, namespace: Namespace, key, states, *, position=None, heads=None,
                 layout: Optional[str] = None, ttl: Optional[float] = None, conv=None,
                 extra=None) -> None:
        """Puts `states` at `key`, the whole two-phase put (a failed put leaves nothing):
        float32 or bfloat16 dense states ([layers, heads, dk, dv], or [.., dv, dk] with layout
        "vk"), which the service encodes in the namespace's format, or uint8 compact v1 blobs
        [layers, heads, blob_bytes]. position (tokens, blocks) defaults to the BlockKey's;
        `heads` (begin, end) puts a head range of every layer; ttl: seconds from reserve to
        commit (None: the server's default). For a namespace with a conv state, `conv` and
        `extra` (as get_into's) are required: they are stored with the states under the one key
        and checksum. AlreadyExistsError if these heads are there."""
        ns = _checks.namespace(namespace)
        h = _checks.heads(ns, heads)
        target = _checks.put_target(ns, key, position, h, ttl)
        info, enc = _checks.states(ns, states, "states", h, layout, writing=False)
        side = _side.plan(ns, info, conv, extra, h, writing=False)
        self._put(target, enc, info, side)

    def _put(self, target, enc, info, side=None) -> None:
        stage = None
        if side is not None:
            stage = _side.staging(side)
            _side.gather(side, stage)
        source = info if stage is None else inspect(stage, "staging")
        with self._handle.use() as c:
            _check(_native.lib().leapcache_put_from(c, ctypes.byref(target), ctypes.byref(enc),
                                                    source.ptr, source.nbytes))

    def batch_get_into(self, namespace: Namespace, keys: Sequence, outs: Sequence, *,
                       heads=None, layout: Optional[str] = None,
                       convs: Optional[Sequence] = None, extras: Optional[Sequence] = None
                       ) -> List[Union[CheckpointInfo, LeapcacheError]]:
        """get_into for each (key, out) pair (and conv, extra: per-item lists as get_into's).
        Every argument is checked before the first get (TypeError/ValueError, nothing sent);
        then each item's result is its CheckpointInfo or the LeapcacheError it failed with, in
        order: one missing key does not stop the rest."""
        ns = _checks.namespace(namespace)
        h = _checks.heads(ns, heads)
        if len(keys) != len(outs):
            raise ValueError(f"{len(keys)} keys but {len(outs)} outs")
        convs = _per_item(convs, len(keys), "convs")
        extras = _per_item(extras, len(keys), "extras")
        plans = []
        for i, (k, o) in enumerate(zip(keys, outs)):
            raw = key_bytes(k, f"keys[{i}]")
            info, enc = _checks.states(ns, o, f"outs[{i}]", h, layout, writing=True)
            side = _side.plan(ns, info, convs[i], extras[i], h, writing=True)
            plans.append((raw, enc, info, side))
        results = []
        self._handle.check_open()
        for raw, enc, info, side in plans:
            try:
                results.append(self._get(ns, raw, h, enc, info, side))
            except ClientClosedError:
                raise  # the whole batch, not an item, failed
            except LeapcacheError as e:
                results.append(e)
        return results

    def batch_put_from(self, namespace: Namespace, keys: Sequence, states: Sequence, *,
                       positions: Optional[Sequence] = None, heads=None,
                       layout: Optional[str] = None, ttl: Optional[float] = None,
                       convs: Optional[Sequence] = None, extras: Optional[Sequence] = None
                       ) -> List[Optional[LeapcacheError]]:
        """put_from for each (key, states) pair (and conv, extra), checked first as
        batch_get_into; each item's result is None (committed) or the LeapcacheError it failed
        with."""
        ns = _checks.namespace(namespace)
        h = _checks.heads(ns, heads)
        if len(keys) != len(states):
            raise ValueError(f"{len(keys)} keys but {len(states)} states")
        if positions is not None and len(positions) != len(keys):
            raise ValueError(f"{len(keys)} keys but {len(positions)} positions")
        convs = _per_item(convs, len(keys), "convs")
        extras = _per_item(extras, len(keys), "extras")
        plans = []
        for i, (k, s) in enumerate(zip(keys, states)):
            target = _checks.put_target(ns, k, None if positions is None else positions[i], h,
                                        ttl)
            info, enc = _checks.states(ns, s, f"states[{i}]", h, layout, writing=False)
            side = _side.plan(ns, info, convs[i], extras[i], h, writing=False)
            plans.append((target, enc, info, side))
        results = []
        self._handle.check_open()
        for target, enc, info, side in plans:
            try:
                self._put(target, enc, info, side)
                results.append(None)
            except ClientClosedError:
                raise  # the whole batch, not an item, failed
            except LeapcacheError as e:
                results.append(e)
        return results

    # ---- keys ----

    def _key_call(self, fn_name: str, namespace, key) -> None:
        ns = _checks.namespace(namespace)
        raw = key_bytes(key)
        with self._handle.use() as c:
            _check(getattr(_native.lib(), fn_name)(c, ns.id, raw))

    def delete(self, namespace: Namespace, key) -> None:
        """Removes the checkpoint at `key`. NotFoundError if there is none."""
        self._key_call("leapcache_delete", namespace, key)

    def pin(self, namespace: Namespace, key) -> None:
        """Keeps the checkpoint at `key` from eviction until unpin."""
        self._key_call("leapcache_pin", namespace, key)

    def unpin(self, namespace: Namespace, key) -> None:
        self._key_call("leapcache_unpin", namespace, key)

    # ---- data plane ----

    def attach(self, name: str, **kwargs) -> "Engine":
        """An Engine on this client's target and options: a data-plane session whose transfers
        move checkpoints straight into and out of registered host or CUDA buffers. Keyword
        arguments as Engine's (transports, gpu_index, ucx_transports, session_ttl, ...)."""
        if self.closed:
            # Same error as any call: the options are still here, but the caller closed us.
            with self._handle.use():
                pass
        from .data_plane import Engine
        return Engine(self._options, name, **kwargs)

    # ---- attached decode ----

    def open_decode(self, namespace: Namespace, *, slots: int, **kwargs) -> "DecodeSession":
        """A DecodeSession of `namespace` on this client's target and options: `slots` live
        states in the service, stepped layer by layer. Keyword arguments as DecodeSession's
        (heads, l2norm_qk, scale, step_channel)."""
        if self.closed:
            with self._handle.use():
                pass
        from .decode import DecodeSession
        return DecodeSession(self._options, namespace, slots=slots, **kwargs)
