"""amnet.coll: teams and collectives on them (docs/collectives.md).

Use it as ``ep.coll`` (a :class:`Coll`): ``ep.coll.world`` and ``ep.coll.node`` are teams,
``ep.coll.team_split(color, key)`` makes more, and every team has barrier, broadcast,
scatter, gather, gather-to-all, exchange, permute, reduce, reduce-to-all and prefix reduce,
blocking and non-blocking, each with a choice of algorithms (``ALGORITHMS``). Like VIS it is
an amnet extension built on the public extension interface: its own system AMs (data,
agreement, verdict, abort, check, acknowledgement) and ``ep.coll`` made by ``attach``.
"""

from .. import Extension
from ._api import Coll, CollHandle, Team
from ._cmail import store as _store
from ._msg import ABORT, ACK, CHECK, DATA, SIG, VERDICT, Mailbox
from ._ops import (
    ADD,
    AND,
    FUNC,
    LOGAND,
    LOGOR,
    MAX,
    MIN,
    MULT,
    NONCOMM_FUNC,
    OR,
    XOR,
    check_op,
    combine,
    fold,
    scan,
)
from ._ops import NAMES as OP_NAMES
from ._pick import parse_choice
from ._table import ALGORITHMS


def _handler(method: str):
    """The system AM handler that hands a message to the rank's mailbox's ``method``."""
    fn = getattr(Mailbox, method)

    def handle(port, src, args, payload, is_reply):
        fn(port.state.box, src, args, payload)

    handle.__name__ = handle.__qualname__ = f"_h_{method.removeprefix('on_')}"
    return handle


def _h_data(port, src, args, payload, is_reply):
    """DATA: the common case filed in C, the rest by the mailbox's on_data."""
    box = port.state.box
    if not _store(box.c_state, args, payload):
        box.on_data(src, args, payload)


_ON = {DATA: "on_data", SIG: "on_sig", VERDICT: "on_verdict", ABORT: "on_abort",
       CHECK: "on_check", ACK: "on_ack"}
_HANDLERS = [_h_data] + [_handler(_ON[i]) for i in range(1, len(_ON))]

#: amnet's package metadata declares it as the ``coll`` entry point of ``amnet.extensions``.
EXTENSION = Extension("coll", _HANDLERS, attach=Coll)

__all__ = ["ADD", "ALGORITHMS", "AND", "FUNC", "LOGAND", "LOGOR", "MAX", "MIN", "MULT",
           "NONCOMM_FUNC", "OP_NAMES", "OR", "XOR", "Coll", "CollHandle", "Team", "check_op",
           "combine", "fold", "parse_choice", "scan"]
