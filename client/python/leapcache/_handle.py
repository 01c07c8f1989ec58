"""A native handle (leapcache_client* or leapcache_engine*) shared by Python threads: calls run
concurrently with the GIL released, and close() waits for the calls in flight before the handle
is destroyed, so no thread ever calls into a freed client."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Optional

from .errors import ClientClosedError


class Handle:
    def __init__(self, ptr: int, destroy: Optional[Callable[[int], None]], what: str):
        self._ptr = ptr
        self._destroy = destroy  # None: borrowed, freed by its owner
        self._what = what
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        """ClientClosedError once close() has begun."""
        if self._closed:
            raise ClientClosedError(f"this {self._what} is closed")

    @contextmanager
    def use(self):
        """The pointer, for one call; ClientClosedError once close() has begun."""
        with self._cond:
            if self._closed:
                raise ClientClosedError(f"this {self._what} is closed")
            self._in_flight += 1
        try:
            yield self._ptr
        finally:
            with self._cond:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._cond.notify_all()

    def close(self) -> None:
        """Refuses new calls, waits for those in flight, then destroys the handle. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            while self._in_flight:
                self._cond.wait()
            ptr, self._ptr = self._ptr, None
        if ptr and self._destroy is not None:
            self._destroy(ptr)
