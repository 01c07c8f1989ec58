"""The exceptions of the leapcache package.

Every failure of a call that reached the library (the server's answer, or the C++ client's own
checks) is a LeapcacheError carrying the gRPC status code (`code`, `code_name`) and the message,
raised as the subclass of that code: NotFoundError, AlreadyExistsError, InvalidArgumentError
(also a ValueError), ... Input this package can check itself (an array's type, dtype, shape,
layout, contiguity or device; a key that is not 32 bytes) raises TypeError or ValueError before
anything is sent. Using a closed Client or Engine raises ClientClosedError.
"""

from __future__ import annotations

from typing import Dict, Type


class LeapcacheError(Exception):
    """A failed leapcache call. `code` is the gRPC status code (1..16)."""

    code: int = 2
    code_name: str = "UNKNOWN"

    def __init__(self, message: str, code: int = None):
        super().__init__(message)
        self.message = message
        if code is not None and code != type(self).code:
            # An instance of the base class for a code without its own subclass.
            self.code = code
            self.code_name = _CODE_NAMES.get(code, f"CODE_{code}")

    def __str__(self) -> str:
        return f"{self.code_name}: {self.message}"


_CODE_NAMES = {
    1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
    6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}

_BY_CODE: Dict[int, Type[LeapcacheError]] = {}


def _code(code: int):
    def register(cls):
        cls.code = code
        cls.code_name = _CODE_NAMES[code]
        _BY_CODE[code] = cls
        return cls
    return register


@_code(1)
class CancelledError(LeapcacheError):
    pass


@_code(2)
class UnknownError(LeapcacheError):
    pass


@_code(3)
class InvalidArgumentError(LeapcacheError, ValueError):
    """The server (or the C++ client) refused a request as malformed."""


@_code(4)
class DeadlineExceededError(LeapcacheError):
    pass


@_code(5)
class NotFoundError(LeapcacheError):
    """Unknown namespace, no checkpoint at the key, or not every requested head there."""


@_code(6)
class AlreadyExistsError(LeapcacheError):
    """These heads are committed at this key already."""


@_code(7)
class PermissionDeniedError(LeapcacheError):
    pass


@_code(8)
class ResourceExhaustedError(LeapcacheError):
    """No memory even after eviction, a quota, or a message over the size limit."""


@_code(9)
class FailedPreconditionError(LeapcacheError):
    pass


@_code(10)
class AbortedError(LeapcacheError):
    pass


@_code(11)
class OutOfRangeError(LeapcacheError):
    pass


@_code(12)
class UnimplementedError(LeapcacheError):
    pass


@_code(13)
class InternalError(LeapcacheError):
    pass


@_code(14)
class UnavailableError(LeapcacheError):
    """The server cannot be reached."""


@_code(15)
class DataLossError(LeapcacheError):
    """A transfer's bytes did not match their checksum."""


@_code(16)
class UnauthenticatedError(LeapcacheError):
    """No valid bearer token."""


class ClientClosedError(FailedPreconditionError):
    """A call on a Client or Engine after close(); nothing was sent."""


def error_for(code: int, message: str) -> LeapcacheError:
    """The exception of a failed call's code and message."""
    cls = _BY_CODE.get(code)
    return cls(message) if cls is not None else LeapcacheError(message, code)
