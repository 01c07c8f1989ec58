"""Engine: a data-plane session (leapcache/data_plane.h's AttachedEngine). The engine registers
its buffers (host memory, or CUDA memory in a CUDA build) once; gets and puts then move
checkpoints straight into and out of them over the transport the service chose (CUDA IPC, NCCL,
UCX, or inline gRPC behind the same calls).

    with client.attach("vllm-0", transports=("cuda_ipc", "inline"), gpu_index=0) as engine:
        ns = engine.client.register_namespace(...)   # transfers then carry the namespace's tag
        slab = engine.register(state_pool)           # a torch CUDA tensor, a numpy array, ...
        engine.get_into(ns, hit.key, state_pool[3])  # any view inside a registered buffer
        engine.put_from(ns, chain[-1], state_pool[5])

A view passed to get_into/put_from must lie inside one registered buffer and be C-contiguous;
the service reads or writes it while the call runs, so leave it untouched until the call returns.
For a namespace with a conv state, states and conv states (conv=, extra=) may be anywhere in host
or CUDA memory (torch tensors for CUDA): the engine joins and splits the units in a staging
buffer it registers itself, one per device, grown as needed.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

from . import _checks, _native, _side
from ._handle import Handle
from .arrays import inspect
from .client import Client, _check, _lookup_batch, _Options, _per_item, _text
from .errors import ClientClosedError, LeapcacheError, error_for
from .hashing import key_bytes
from .types import TRANSPORTS, CheckpointInfo, LookupResult, Namespace, name_of

_MEMORY = {"cpu": 1, "cuda": 2}


def transports_built() -> List[str]:
    """The transports this build of the library has ("inline" always)."""
    lib = _native.lib()
    return [name for name, value in TRANSPORTS.items() if lib.leapcache_transport_built(value)]


@dataclass(frozen=True)
class Buffer:
    """A registered buffer: [ptr, ptr + nbytes) of host ("cpu") or "cuda" memory."""

    id: int
    ptr: int
    nbytes: int
    device: str
    owner: object  # the registered array, kept alive while registered

    def holds(self, ptr: int, nbytes: int) -> bool:
        return self.ptr <= ptr and ptr + nbytes <= self.ptr + self.nbytes


class Engine:
    """An attached engine. name: the engine's name (required); transports: offered, by name
    ("cuda_ipc", "nccl", "ucx", "inline"; None: UCX and inline), the service picks; gpu_index /
    gpu_uuid: the engine's GPU; ucx_transports: UCX_TLS of its UCX context; session_ttl:
    seconds of idleness after which the service ends the session (a keepalive runs)."""

    def __init__(self, options: _Options, name: str, *,
                 transports: Optional[Sequence[str]] = None, gpu_index: int = -1,
                 gpu_uuid: str = "", host: str = "", pid: int = 0, ucx_transports: str = "",
                 session_ttl: float = 60.0):
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        kinds = None
        if transports is not None:
            if isinstance(transports, str):
                transports = (transports,)
            unknown = [t for t in transports if t not in TRANSPORTS]
            if unknown or not transports:
                raise ValueError(f"transports must name some of {sorted(TRANSPORTS)}, got "
                                 f"{list(transports)!r}")
            kinds = (ctypes.c_int32 * len(transports))(*[TRANSPORTS[t] for t in transports])
        if isinstance(session_ttl, bool) or not isinstance(session_ttl, (int, float)) or \
                session_ttl < 1:
            raise ValueError(f"session_ttl must be at least 1 second, got {session_ttl!r}")
        keep = [_text(name, "name"), _text(host, "host"), _text(gpu_uuid, "gpu_uuid"),
                _text(ucx_transports, "ucx_transports")]
        a = _native.new(_native.AttachOptions, name=keep[0], host=keep[1], pid=pid,
                        gpu_uuid=keep[2], gpu_index=gpu_index, ucx_transports=keep[3],
                        session_ttl_ms=int(session_ttl * 1000))
        if kinds is not None:
            a.transports = ctypes.cast(kinds, ctypes.POINTER(ctypes.c_int32))
            a.n_transports = len(kinds)
        lib = _native.lib()
        ptr = ctypes.c_void_p()
        _check(lib.leapcache_engine_attach(ctypes.byref(options.native), ctypes.byref(a),
                                           ctypes.byref(ptr)))
        self._handle = Handle(ptr.value, lib.leapcache_engine_destroy, "Engine")
        self.name = name
        self.transport = name_of("transport", lib.leapcache_engine_transport(ptr.value))
        self.session_id = lib.leapcache_engine_session_id(ptr.value)
        # The engine's own connection: namespaces registered through it carry their tag in
        # the engine's transfers.
        self.client = Client._borrowed(lib.leapcache_engine_client(ptr.value), options)
        self._buffers: Dict[int, Buffer] = {}
        self._stages: Dict[tuple, tuple] = {}  # (device, index) -> (Buffer, staging array)

    # ---- lifetime ----

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def detach(self) -> None:
        """Ends the session now (registrations too); later transfers raise. close() frees."""
        with self._handle.use() as e:
            _check(_native.lib().leapcache_engine_detach(e))
        self._buffers.clear()
        self._stages.clear()

    def close(self) -> None:
        """Detaches and frees the engine and its client; waits for calls in flight."""
        self.client.close()
        self._handle.close()
        self._buffers.clear()
        self._stages.clear()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ---- buffers ----

    def register(self, array) -> Buffer:
        """Registers the whole of `array` (C-contiguous host or CUDA memory) for transfers.
        The Buffer keeps the array alive until release() or close()."""
        info = inspect(array, "array")
        if not info.contiguous:
            raise ValueError("array is not C-contiguous: register the contiguous slab that "
                             "holds the states")
        if info.nbytes == 0:
            raise ValueError("array is empty")
        buffer_id = ctypes.c_uint64(0)
        with self._handle.use() as e:
            _check(_native.lib().leapcache_engine_register_buffer(
                e, info.ptr, info.nbytes, _MEMORY[info.device], ctypes.byref(buffer_id)))
        b = Buffer(id=buffer_id.value, ptr=info.ptr, nbytes=info.nbytes, device=info.device,
                   owner=array)
        self._buffers[b.id] = b
        return b

    def release(self, buffer: Buffer) -> None:
        if not isinstance(buffer, Buffer):
            raise TypeError(f"buffer must be a Buffer from register, got {type(buffer).__name__}")
        with self._handle.use() as e:
            _check(_native.lib().leapcache_engine_release_buffer(e, buffer.id))
        self._buffers.pop(buffer.id, None)

    def _locate(self, info, what: str):
        """(buffer id, offset) of the registered buffer holding the array's bytes."""
        for b in list(self._buffers.values()):
            if b.device == info.device and b.holds(info.ptr, info.nbytes):
                return b.id, info.ptr - b.ptr
        raise ValueError(f"{what} is not inside a registered buffer: register() the memory "
                         "that holds it first")

    # ---- transfers ----

    def lookup_batch(self, namespace: Namespace, chains: Sequence[Sequence[bytes]], *,
                     heads=None, max_depth: Union[int, Sequence[int]] = 0,
                     block_tokens: Optional[int] = None
                     ) -> List[Union[LookupResult, LeapcacheError]]:
        """Client.lookup_batch through this engine's session: its transfer channel (shared
        memory, microseconds a lookup) when the service is on this host and the batch fits,
        else the RPC. Namespaces registered through self.client carry their tag."""
        return _lookup_batch(self._handle, _native.lib().leapcache_engine_lookup_batch,
                             namespace, chains, heads, max_depth, block_tokens)

    def lookup(self, namespace: Namespace, chain: Sequence[bytes], *, heads=None,
               max_depth: int = 0, block_tokens: Optional[int] = None) -> LookupResult:
        """Client.lookup through this engine's session (as lookup_batch); raises the
        LeapcacheError of a refused lookup."""
        if isinstance(max_depth, bool) or not isinstance(max_depth, int):
            raise ValueError(f"max_depth must be an int >= 0, got {max_depth!r}")
        result = self.lookup_batch(namespace, [chain], heads=heads, max_depth=max_depth,
                                   block_tokens=block_tokens)[0]
        if isinstance(result, LeapcacheError):
            raise result
        return result

    def get_into(self, namespace: Namespace, key, out, *, heads=None, layers=None,
                 layout: Optional[str] = None, conv=None, extra=None) -> CheckpointInfo:
        """As Client.get_into, with `out` inside a registered buffer (host or CUDA); with conv=
        (and extra=) for a namespace with a conv state, through the engine's staging buffer.
        `layers` (begin, end) reads those layers only, e.g. each layer into its own page."""
        ns = _checks.namespace(namespace)
        h = _checks.heads(ns, heads)
        lr = _checks.layers(ns, layers)
        raw = key_bytes(key)
        return self._run_get(ns, raw, h, self._plan(_checks.of_layers(ns, lr), h, out, layout,
                                                    conv, extra, "out", writing=True), lr)

    def put_from(self, namespace: Namespace, key, states, *, position=None, heads=None,
                 layout: Optional[str] = None, ttl: Optional[float] = None, conv=None,
                 extra=None) -> None:
        """As Client.put_from, with `states` inside a registered buffer (host or CUDA); with
        conv= (and extra=) for a namespace with a conv state, through the engine's staging
        buffer."""
        ns = _checks.namespace(namespace)
        h = _checks.heads(ns, heads)
        target = _checks.put_target(ns, key, position, h, ttl)
        self._run_put(target, self._plan(ns, h, states, layout, conv, extra, "states",
                                         writing=False))

    def _plan(self, ns, h, array, layout, conv, extra, what: str, writing: bool):
        """One transfer, checked: (encoding, side plan or None, device index, buffer id,
        offset, length). With a side plan the bytes go through the staging buffer."""
        staged = ns.side_bytes > 0 and (conv is not None or extra is not None)
        info, enc = _checks.states(ns, array, what, h, layout, writing=writing, device=None,
                                   whole_units=not staged)
        if staged:
            side = _side.plan(ns, info, conv, extra, h, writing=writing, device=info.device)
            return enc, side, info.device_index, None, 0, side.nbytes
        return (enc, None, -1) + self._locate(info, what) + (info.nbytes,)

    def _run_get(self, ns, raw, h, plan, lr=None) -> CheckpointInfo:
        enc, side, device_index, buffer_id, offset, _ = plan
        if side is None:
            return self._get(ns, raw, h, enc, buffer_id, offset, lr)
        buffer, stage = self._stage(side, device_index)
        result = self._get(ns, raw, h, enc, buffer.id, 0, lr)
        _side.scatter(side, stage)
        return result

    def _run_put(self, target, plan) -> None:
        enc, side, device_index, buffer_id, offset, length = plan
        if side is None:
            self._put(target, enc, buffer_id, offset, length)
            return
        buffer, stage = self._stage(side, device_index)
        _side.gather(side, stage)
        if side.device == "cuda":
            # The service reads the staging buffer from its own context: the copies into it
            # must be done first.
            import torch
            torch.cuda.synchronize(stage.device)
        self._put(target, enc, buffer.id, 0, length)

    def _stage(self, side, device_index: int):
        """The registered staging buffer of the plan's device, at least side.nbytes long, as
        (Buffer, [units, unit_bytes] view of its start)."""
        slot = (side.device, device_index)
        held = self._stages.get(slot)
        if held is None or held[0].nbytes < side.nbytes:
            if held is not None:
                self.release(held[0])
            stage = _side.staging(side, device_index)
            held = (self.register(stage), stage.reshape(-1))
            self._stages[slot] = held
        flat = held[1][:side.nbytes]
        return held[0], flat.reshape(side.units, side.unit_bytes)

    def _get(self, ns, raw, h, enc, buffer_id, offset, lr=None) -> CheckpointInfo:
        result = _native.new(_native.CheckpointInfo)
        hr = _checks.head_range(h)
        layer_range = _checks.layer_range(lr)
        with self._handle.use() as e:
            _check(_native.lib().leapcache_engine_get_layers_into(
                e, ns.id, raw, ctypes.byref(hr) if hr else None,
                ctypes.byref(layer_range) if layer_range else None, ctypes.byref(enc), buffer_id,
                offset, ctypes.byref(result)))
        return CheckpointInfo.from_native(result, 0 if lr is None else lr[0])

    def _put(self, target, enc, buffer_id, offset, length) -> None:
        with self._handle.use() as e:
            _check(_native.lib().leapcache_engine_put_from(
                e, ctypes.byref(target), ctypes.byref(enc), buffer_id, offset, length))

    def batch_get_into(self, namespace: Namespace, keys: Sequence, outs: Sequence, *,
                       heads=None, layers=None, layout: Optional[str] = None,
                       convs: Optional[Sequence] = None, extras: Optional[Sequence] = None
                       ) -> List[Union[CheckpointInfo, LeapcacheError]]:
        """As Client.batch_get_into, over the data plane: outs inside registered buffers, in
        as few calls as the transport allows (one per 128 gets through the transfer channel;
        conv=/extra= staging runs a call per get). `layers` applies to every item: one per
        layer of a checkpoint, into the page the engine keeps for it, is a batch of the same
        key with layers=(l, l + 1) each (call once per layer range)."""
        ns = _checks.namespace(namespace)
        h = _checks.heads(ns, heads)
        lr = _checks.layers(ns, layers)
        if len(keys) != len(outs):
            raise ValueError(f"{len(keys)} keys but {len(outs)} outs")
        convs = _per_item(convs, len(keys), "convs")
        extras = _per_item(extras, len(keys), "extras")
        shaped = _checks.of_layers(ns, lr)
        plans = []
        for i, (k, o) in enumerate(zip(keys, outs)):
            raw = key_bytes(k, f"keys[{i}]")
            plans.append((raw, self._plan(shaped, h, o, layout, convs[i], extras[i],
                                          f"outs[{i}]", writing=True)))
        self._handle.check_open()
        if plans and all(plan[1] is None for _, plan in plans):
            results = []
            for first in range(0, len(plans), 4096):
                results += self._get_batch(ns, h, lr, plans[first:first + 4096])
            return results
        results = []
        for raw, plan in plans:
            try:
                results.append(self._run_get(ns, raw, h, plan, lr))
            except ClientClosedError:
                raise  # the whole batch, not an item, failed
            except LeapcacheError as err:
                results.append(err)
        return results

    def _get_batch(self, ns, h, lr, plans) -> List[Union[CheckpointInfo, LeapcacheError]]:
        """Gets straight into registered views (no side plans) in one library call."""
        n = len(plans)
        hr = _checks.head_range(h)
        layer_range = _checks.layer_range(lr)
        hashes = (ctypes.c_uint8 * (32 * n)).from_buffer_copy(b"".join(raw for raw, _ in plans))
        encodings = (_native.Encoding * n)(*[plan[0] for _, plan in plans])
        gets = (_native.EngineGet * n)()
        for i, (_, (enc, _, _, buffer_id, offset, _)) in enumerate(plans):
            gets[i] = _native.new(
                _native.EngineGet, namespace_id=ns.id,
                hash=ctypes.cast(ctypes.addressof(hashes) + 32 * i, ctypes.c_void_p),
                heads=ctypes.pointer(hr) if hr else None,
                layers=ctypes.pointer(layer_range) if layer_range else None,
                encoding=ctypes.pointer(encodings[i]), buffer_id=buffer_id, offset=offset)
        infos = (_native.CheckpointInfo * n)()
        for info in infos:
            info.struct_size = ctypes.sizeof(_native.CheckpointInfo)
        codes = (ctypes.c_int32 * n)()
        with self._handle.use() as e:
            _check(_native.lib().leapcache_engine_get_batch(e, gets, n, infos, codes))
            messages = [_native.batch_error(i) if codes[i] else "" for i in range(n)]
        first = 0 if lr is None else lr[0]
        return [CheckpointInfo.from_native(infos[i], first) if codes[i] == 0
                else error_for(codes[i], messages[i]) for i in range(n)]

    def batch_put_from(self, namespace: Namespace, keys: Sequence, states: Sequence, *,
                       positions: Optional[Sequence] = None, heads=None,
                       layout: Optional[str] = None, ttl: Optional[float] = None,
                       convs: Optional[Sequence] = None, extras: Optional[Sequence] = None
                       ) -> List[Optional[LeapcacheError]]:
        """As Client.batch_put_from, over the data plane."""
        ns = _checks.namespace(namespace)
        h = _checks.heads(ns, heads)
        if len(keys) != len(states):
            raise ValueError(f"{len(keys)} keys but {len(states)} states")
        if positions is not None and len(positions) != len(keys):
            raise ValueError(f"{len(keys)} keys but {len(positions)} positions")
        convs = _per_item(convs, len(keys), "convs")
        extras = _per_item(extras, len(keys), "extras")
        plans = []
        for i, (k, st) in enumerate(zip(keys, states)):
            target = _checks.put_target(ns, k, None if positions is None else positions[i], h,
                                        ttl)
            plans.append((target, self._plan(ns, h, st, layout, convs[i], extras[i],
                                             f"states[{i}]", writing=False)))
        results = []
        self._handle.check_open()
        for target, plan in plans:
            try:
                self._run_put(target, plan)
                results.append(None)
            except ClientClosedError:
                raise  # the whole batch, not an item, failed
            except LeapcacheError as err:
                results.append(err)
        return results
