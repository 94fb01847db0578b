"""The token a handler receives: who sent the AM, and the one way to answer it."""

from __future__ import annotations

from typing import Any

from .._errors import AMContextError
from . import _wire as W


class Token:
    """Handed to a handler: who sent the AM and how to reply. Valid only during the call."""

    __slots__ = ("_eng", "_live", "_replied", "_rs", "handler", "is_request", "source")

    def __init__(self, eng: Any, rs: Any, source: int, is_request: bool,
                 handler: str) -> None:
        self._eng = eng
        self._rs = rs
        self.source = source
        self.is_request = is_request
        self.handler = handler
        self._replied = False
        self._live = True

    @property
    def rank(self) -> int:
        """The rank the AM was sent to (the one whose handler runs)."""
        return self._rs.rank

    def _check(self, what: str) -> None:
        if not self._live:
            raise AMContextError(f"token.{what}() after handler {self.handler} returned; a "
                                 "reply must be sent from inside the request handler")
        if not self.is_request:
            raise AMContextError(f"token.{what}() in reply handler {self.handler}: a reply "
                                 "handler sends nothing")
        if self._replied:
            raise AMContextError(f"token.{what}(): request handler {self.handler} already "
                                 "replied; a request handler replies at most once")
        if self._eng.tls.__dict__.get("token") is not self:
            raise AMContextError(f"token.{what}() from another thread than the one running "
                                 f"handler {self.handler}")

    def reply_short(self, handler: Any, *args: int) -> None:
        """Send a Short reply to ``token.source``.

        Raises:
            AMContextError: not in a request handler, or it already replied.
            HandlerNotRegistered / HandlerCategoryError / AMArgumentError: bad handler or args.
        """
        self._check("reply_short")
        self._eng.send_user(self._rs, W.SHORT | W.REPLY, self.source, handler, None, 0, args)
        self._replied = True

    def reply_medium(self, handler: Any, payload: Any, *args: int) -> None:
        """Send a Medium reply (payload of at most ``ep.max_medium`` bytes) to the source.

        Raises: as :meth:`reply_short`, plus PayloadTooLarge.
        """
        self._check("reply_medium")
        self._eng.send_user(self._rs, W.MEDIUM | W.REPLY, self.source, handler, payload, 0,
                            args)
        self._replied = True

    def reply_long(self, handler: Any, payload: Any, dest_offset: int, *args: int) -> None:
        """Send a Long reply: ``payload`` lands at ``dest_offset`` in the source's segment.

        Raises: as :meth:`reply_short`, plus SegmentBoundsError.
        """
        self._check("reply_long")
        self._eng.send_user(self._rs, W.LONG | W.REPLY, self.source, handler, payload,
                            dest_offset, args)
        self._replied = True

    def __repr__(self) -> str:
        kind = "request" if self.is_request else "reply"
        return f"<amnet.Token {kind} {self.handler} from rank {self.source}>"
