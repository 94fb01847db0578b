"""amnet.coll: teams and collectives on them (docs/collectives.md).

Use it as ``ep.coll`` (a :class:`Coll`): ``ep.coll.world`` and ``ep.coll.node`` are teams,
``ep.coll.team_split(color, key)`` makes more, and every team has barrier, broadcast,
scatter, gather, gather-to-all, exchange, permute, reduce, reduce-to-all and prefix reduce,
blocking and non-blocking, each with a choice of algorithms (``ALGORITHMS``). Like VIS it is
an amnet extension built on the public extension interface: its own system AMs (data,
agreement, verdict, abort, check, acknowledgement) and ``ep.coll`` made by ``attach``.
"""

from .. import Extension
from ._api import Coll, CollHandle, Team, parse_choice
from ._msg import ABORT, ACK, CHECK, DATA, SIG, VERDICT
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
from ._table import ALGORITHMS


def _h_data(port, src, args, payload, is_reply):
    port.state.box.on_data(src, args, payload)


def _h_sig(port, src, args, payload, is_reply):
    port.state.box.on_sig(src, args, payload)


def _h_verdict(port, src, args, payload, is_reply):
    port.state.box.on_verdict(src, args, payload)


def _h_abort(port, src, args, payload, is_reply):
    port.state.box.on_abort(src, args, payload)


def _h_check(port, src, args, payload, is_reply):
    port.state.box.on_check(src, args, payload)


def _h_ack(port, src, args, payload, is_reply):
    port.state.box.on_ack(src, args, payload)


_HANDLERS = [None] * 6
_HANDLERS[DATA], _HANDLERS[SIG], _HANDLERS[VERDICT] = _h_data, _h_sig, _h_verdict
_HANDLERS[ABORT], _HANDLERS[CHECK], _HANDLERS[ACK] = _h_abort, _h_check, _h_ack

#: amnet's package metadata declares it as the ``coll`` entry point of ``amnet.extensions``.
EXTENSION = Extension("coll", _HANDLERS, attach=Coll)

__all__ = ["ADD", "ALGORITHMS", "AND", "FUNC", "LOGAND", "LOGOR", "MAX", "MIN", "MULT",
           "NONCOMM_FUNC", "OP_NAMES", "OR", "XOR", "Coll", "CollHandle", "Team", "check_op",
           "combine", "fold", "parse_choice", "scan"]
