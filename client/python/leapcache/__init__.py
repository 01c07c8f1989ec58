"""leapcache: the Python client of the leapcache state-cache service.

A thin layer over the C++ client (through libleapcache_c and ctypes): the same connection,
checks, chunked and checksummed transfers and data plane, with numpy arrays and torch tensors as
the buffers.

    import leapcache
    with leapcache.Client("127.0.0.1:7470") as client:
        ns = client.register_namespace("tenant-a", kind="gdn", layers=2, heads=4)
        chain = leapcache.chain_hashes(token_ids, block_tokens=256)
        hit = client.lookup(ns, chain)

A checkpoint holds the recurrent state of every (layer, head) and, where the namespace declares
them, the head's short-convolution state and extra bytes (conv=, extra= of the same calls).
"""

from .client import Client
from .data_plane import Buffer, Engine, transports_built
from .decode import DecodeSession
from .errors import (AbortedError, AlreadyExistsError, CancelledError, ClientClosedError,
                     DataLossError, DeadlineExceededError, FailedPreconditionError,
                     InternalError, InvalidArgumentError, LeapcacheError, NotFoundError,
                     OutOfRangeError, PermissionDeniedError, ResourceExhaustedError,
                     UnauthenticatedError, UnavailableError, UnimplementedError, UnknownError)
from .hashing import BlockKey, chain_hashes, crc32c
from .types import (CheckpointInfo, ConvShape, FormatMemoryStats, LookupResult, Namespace,
                    Stats, StorageFormat, TierStats, TLSConfig)

__version__ = "0.1.0"

__all__ = [
    "Client", "Engine", "Buffer", "DecodeSession", "transports_built", "chain_hashes", "crc32c", "BlockKey",
    "Namespace", "ConvShape", "StorageFormat", "LookupResult", "CheckpointInfo", "Stats",
    "TierStats", "FormatMemoryStats", "TLSConfig",
    "LeapcacheError", "ClientClosedError", "CancelledError", "UnknownError",
    "InvalidArgumentError", "DeadlineExceededError", "NotFoundError", "AlreadyExistsError",
    "PermissionDeniedError", "ResourceExhaustedError", "FailedPreconditionError", "AbortedError",
    "OutOfRangeError", "UnimplementedError", "InternalError", "UnavailableError",
    "DataLossError", "UnauthenticatedError",
]
