"""upc_rt's exceptions: each a member of amnet's family (``amnet.AMNetError``) and, where
Python has one, of the builtin a UPC programmer would reach for."""

from __future__ import annotations

from amnet import AMNetError, InitError


class UPCError(AMNetError):
    """Base of upc_rt's own errors."""


class NotInitialized(UPCError, InitError):
    """Raised by any upc_rt call made before ``upc.init()`` on the calling rank-thread (or
    from a thread that is not a rank-thread)."""


class BoundsError(UPCError, IndexError):
    """Raised before anything moves when an access or copy would leave its allocation; the
    message names the allocation and the bound."""


class LockError(UPCError, RuntimeError):
    """Raised by ``unlock`` of a lock the caller does not hold, and by any use of a lock
    after ``lock_free``."""
