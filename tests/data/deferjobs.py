"""Jobs for tests/test_defer.py: ``ep.defer`` (how a handler forwards to a third rank) and
the signature check of declared handlers at registration."""

from __future__ import annotations

SEEN: dict[int, list] = {}  # rank -> what its handlers saw (threads share the module)


def hop(token, k):
    ep = token.endpoint
    SEEN.setdefault(ep.rank, []).append(k)
    if k < 3 * ep.size:
        ep.defer(ep.request_short, (ep.rank + 1) % ep.size, hop, k + 1)


def put_back(token, k):
    """Answer a request with a put into the source's segment (a send a handler may not make
    itself), then a request that says it is there."""
    ep = token.endpoint

    def answer(src, value):
        ep.put(src, 0, value.to_bytes(8, "little"))
        ep.request_short(src, landed, value)

    ep.defer(answer, token.source, k * 10)


def landed(token, v):
    SEEN.setdefault(token.endpoint.rank, []).append(("landed", v))


def forward_ring(ep) -> dict:
    """A token travels three times around the ring, each handler forwarding it; then every
    rank asks its right neighbour for a put answered from a handler through ep.defer."""
    ep.register_handlers([hop, put_back, landed])
    me, n = ep.rank, ep.size
    ep.barrier()
    if me == 0:
        ep.request_short(1, hop, 1)
    assert ep.wait_until(lambda: len(SEEN.get(me, [])) == 3, timeout=60), SEEN.get(me)
    ep.barrier()
    ep.request_short((me + 1) % n, put_back, me + 1)
    assert ep.wait_until(lambda: len(SEEN.get(me, [])) == 4, timeout=60), SEEN.get(me)
    value = int.from_bytes(bytes(ep.segment[:8]), "little")
    # outside a handler: runs at the next amnet call
    later = []
    ep.defer(later.append, "ran")
    ep.poll()
    errors = []
    try:
        ep.defer("not callable")
    except TypeError as e:
        errors.append(str(e))
    ep.barrier()
    return {"seen": SEEN[me], "value": value, "later": later, "errors": errors}


def boom_later(token):
    def fail():
        raise KeyError("a deferred function that fails")

    token.endpoint.defer(fail)


def deferred_raises(ep) -> None:
    ep.register_handlers([boom_later])
    ep.barrier()
    if ep.rank == 0:
        ep.request_short(1, boom_later)
    ep.barrier()
    ep.barrier()


def bad_declaration(ep) -> dict:
    """A declaration set by hand (not by @amnet.handler) on a handler that cannot take the
    call: refused by register_handlers on every rank, the table unchanged."""

    def tally(a, b):  # the token forgotten
        pass

    tally.__amnet_handler__ = ("short", 2)
    before = ep.handlers
    try:
        ep.register_handlers([tally])
    except TypeError as e:
        return {"error": str(e), "unchanged": ep.handlers == before}
    return {"error": None}
