"""Jobs for tests/test_coll.py: each runs in every rank and checks amnet.coll against numpy
models, naming the collective, algorithm and member on a failure."""

from __future__ import annotations

import time

import numpy as np

import amnet
from amnet.coll import ADD, ALGORITHMS, AND, FUNC, LOGOR, MAX, MIN, MULT, NONCOMM_FUNC, XOR


def _mm(a, b):  # 2x2 integer matrix product: associative, not commutative
    return (a.reshape(2, 2) @ b.reshape(2, 2)).ravel()


def _mat(i: int, k: int) -> np.ndarray:
    return np.array([1, (i + k) % 5, (i * 3) % 2, 1 + (i % 2)], np.int64)


def _data(i: int, n: int, salt: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.int64) * 7 + i * 31 + salt) % 251).astype(np.uint8)


def check_team(T, n: int, salt: int = 0, naive: bool = True) -> int:
    """Every collective with every algorithm (``naive``: the naive ones too) on team T,
    blocks of n bytes; returns how many calls were checked."""
    P, me = T.size, T.index
    calls = 0

    def algorithms(what: str) -> list[str]:
        return [a for a in ALGORITHMS[what] if naive or not a.startswith("naive")]

    def ok(cond, *what):
        assert cond, (T.name, me, *what)

    for alg in algorithms("broadcast"):
        for root in range(P):
            src = _data(root, n, salt)
            dst = np.zeros(n, np.uint8)
            T.broadcast(dst, src if me == root else None, root=root, algorithm=alg)
            ok(np.array_equal(dst, src), "broadcast", alg, root)
            calls += 1
    for alg in algorithms("scatter"):
        root = (salt + 1) % P
        src = np.concatenate([_data(i, n, salt) for i in range(P)])
        dst = np.zeros(n, np.uint8)
        T.scatter(dst, src if me == root else None, root=root, algorithm=alg)
        ok(np.array_equal(dst, _data(me, n, salt)), "scatter", alg, root)
        calls += 1
    for alg in algorithms("gather"):
        root = (salt + 2) % P
        dst = np.zeros(n * P, np.uint8)
        T.gather(dst if me == root else None, _data(me, n, salt), root=root, algorithm=alg)
        if me == root:
            ok(np.array_equal(dst, np.concatenate([_data(i, n, salt) for i in range(P)])),
               "gather", alg, root)
        calls += 1
    for alg in algorithms("gather_all"):
        dst = np.zeros(n * P, np.uint8)
        T.gather_all(dst, _data(me, n, salt), algorithm=alg)
        ok(np.array_equal(dst, np.concatenate([_data(i, n, salt) for i in range(P)])),
           "gather_all", alg)
        calls += 1
    for alg in algorithms("exchange"):
        src = np.concatenate([_data(me * P + j, n, salt) for j in range(P)])
        dst = np.zeros(n * P, np.uint8)
        T.exchange(dst, src, algorithm=alg)
        ok(np.array_equal(dst, np.concatenate([_data(i * P + me, n, salt) for i in range(P)])),
           "exchange", alg)
        calls += 1
    perm = [(3 * i + 1 + salt) % P for i in range(P)]
    if sorted(perm) != list(range(P)):
        perm = [(i + 1 + salt) % P for i in range(P)]
    for alg in algorithms("permute"):
        dst = np.zeros(n, np.uint8)
        T.permute(dst, _data(me, n, salt), perm, algorithm=alg)
        ok(np.array_equal(dst, _data(perm.index(me), n, salt)), "permute", alg)
        calls += 1
    cases = [(ADD, None, "i8"), (MULT, None, "f8"), (MIN, None, "i4"), (MAX, None, "f4"),
             (AND, None, "u2"), (XOR, None, "i8"), (LOGOR, None, "u1"),
             (FUNC, np.maximum, "i8"), (NONCOMM_FUNC, _mm, "i8")]
    m = max(1, n // 8)

    def val(i: int, dt: str, op: int) -> np.ndarray:
        if op == NONCOMM_FUNC:
            return _mat(i, salt)
        x = (np.arange(m) * 3 + i * 5 + salt) % 7
        if op == MULT:
            x = x % 3 + 1
        if op == LOGOR:
            x = (x > 4).astype(np.int64)
        return x.astype(dt)

    def model(upto: int, op: int, func, dt: str) -> np.ndarray:
        acc = val(0, dt, op)
        for i in range(1, upto + 1):
            x = val(i, dt, op)
            acc = {ADD: np.add, MULT: np.multiply, MIN: np.minimum, MAX: np.maximum,
                   AND: np.bitwise_and, XOR: np.bitwise_xor,
                   LOGOR: lambda a, b: np.logical_or(a, b).astype(a.dtype)}.get(
                op, func)(acc, x).astype(acc.dtype)
        return acc

    for what in ("reduce", "reduce_all", "prefix_reduce"):
        for alg in algorithms(what):
            for op, func, dt in cases:
                src = val(me, dt, op)
                dst = np.zeros_like(src)
                if what == "reduce":
                    root = (salt + op) % P
                    T.reduce(dst, src, op, root=root, func=func, algorithm=alg)
                    if me == root:
                        ok(np.array_equal(dst, model(P - 1, op, func, dt)), what, alg, op)
                elif what == "reduce_all":
                    T.reduce_all(dst, src, op, func=func, algorithm=alg)
                    ok(np.array_equal(dst, model(P - 1, op, func, dt)), what, alg, op)
                else:
                    T.prefix_reduce(dst, src, op, func=func, algorithm=alg)
                    ok(np.array_equal(dst, model(me, op, func, dt)), what, alg, op)
                calls += 1
    for alg in algorithms("barrier"):
        T.barrier(algorithm=alg)
        calls += 1
    return calls


def every(ep, n: int = 24) -> list[int]:
    """check_team on the world, on a split of it into odd/even ranks (reverse order), and on
    my node's team."""
    c = ep.coll
    got = [check_team(c.world, n)]
    sub = ep.team_split(ep.rank % 2, -ep.rank)
    assert sub.members == sorted([r for r in range(ep.size) if r % 2 == ep.rank % 2],
                                 reverse=True)
    got.append(check_team(sub, n + 5, salt=1))
    got.append(check_team(c.node, 3, salt=2))
    none = c.team_split(None if ep.rank == 0 else 1)  # rank 0 joins no team
    assert (none is None) == (ep.rank == 0)
    c.world.barrier()
    return got


def landing(ep, n: int) -> list[int]:
    """check_team, but the naive algorithms, with blocks large enough that a message which
    arrives while its receiver waits goes straight into the destination buffer."""
    sub = ep.team_split(ep.rank % 2, -ep.rank)
    return [check_team(ep.coll.world, n, naive=False), check_team(sub, n + 8, 1, False)]


def big(ep, n: int) -> bool:
    """Blocks larger than max_medium travel in chunks; segment offsets as buffers."""
    c = ep.coll.world
    P, me = c.size, c.index
    src = _data(me, n, 9)
    dst = np.zeros(n * P, np.uint8)
    for alg in ("ring", "xor", "push", "pull"):
        dst[:] = 0
        c.gather_all(dst, src, algorithm=alg)
        assert np.array_equal(dst, np.concatenate([_data(i, n, 9) for i in range(P)])), alg
    seg = ep.segment
    seg[:n] = _data(me, n, 3)
    c.broadcast(n, 0, root=P - 1, nbytes=n)  # segment offsets: dst at n, src at 0
    assert np.array_equal(seg[n:2 * n], _data(P - 1, n, 3))
    return True


def nonblocking(ep) -> list[int]:
    """Several calls in flight on two teams, completed in reverse order."""
    c = ep.coll
    sub = ep.team_split(ep.rank % 2)
    a = np.zeros(4, np.int64)
    b = np.zeros(sub.size, np.int64)
    d = np.zeros(1, np.int64)
    hs = [c.world.reduce_all_nb(a, np.arange(4, dtype=np.int64) + ep.rank, ADD),
          sub.gather_all_nb(b, np.array([ep.rank], np.int64)),
          c.world.barrier_nb(),
          c.world.prefix_reduce_nb(d, np.array([1], np.int64), ADD)]
    while not hs[-1].test():
        pass
    for h in reversed(hs):
        h.wait()
    assert np.array_equal(a, sum(np.arange(4) + r for r in range(ep.size)))
    assert np.array_equal(b, sub.members)
    return [int(d[0])]


def _mismatches(ep) -> list:
    c = ep.coll.world
    buf = np.zeros(8, np.uint8)
    return [
        lambda: c.broadcast(buf, buf, root=0) if ep.rank else c.gather_all(
            np.zeros(8 * c.size, np.uint8), buf),
        lambda: c.broadcast(buf, buf, root=min(ep.rank, 1)),
        lambda: c.broadcast(buf[:4 + (ep.rank == 1)], buf[:4 + (ep.rank == 1)]),
        lambda: c.barrier(algorithm="hier" if ep.rank == 2 else "dissemination"),
        # every member a root that receives nothing: only the data left over tells
        lambda: c.broadcast(buf, buf, root=ep.rank, algorithm="push"),
    ]


def mismatch(ep) -> list[str]:
    """coll_check=strict: members calling different collectives, roots, sizes or algorithms
    all fail in the call, naming it; the team works afterwards."""
    c = ep.coll.world
    out = []
    for case in _mismatches(ep):
        try:
            case()
            out.append("no error")
        except amnet.CollectiveMismatch as e:
            out.append(str(e))
        c.barrier()
    return out


def mismatch_lazy(ep) -> list[str]:
    """The lazy check: each mismatch is raised by the call, or -- on a member that had
    completed its part -- at the end of its next call on the team; the team stays in step."""
    import time

    c = ep.coll.world
    out = []
    for case in _mismatches(ep):
        got = []
        for call in (case, c.barrier, "settle", c.barrier):
            if call == "settle":  # every member out of the case, the check's messages in:
                ep.barrier()  # the check takes a few hops (ask, descriptions, verdicts), each
                end = time.monotonic() + 0.3  # run when its process polls: all keep polling
                while time.monotonic() < end:
                    ep.poll()
                    time.sleep(0.001)
                continue
            try:
                call()
            except amnet.CollectiveMismatch as e:
                got.append(str(e))
        out.append(" | ".join(got) or "no error")
    return out


_INSIDE: dict[int, list[str]] = {}  # rank -> what collectives called in a handler raised
_PENDING: dict[int, object] = {}  # rank -> a collective's handle started outside handlers


def h_coll_inside(tok) -> None:
    """A handler calling collectives, or waiting for one: each raises AMContextError (before
    sending)."""
    c = tok.endpoint.coll.world
    got = []
    for call in (c.barrier, c.barrier_nb, lambda: c.broadcast(np.zeros(4), np.zeros(4)),
                 _PENDING[tok.endpoint.rank].wait, _PENDING[tok.endpoint.rank].test):
        try:
            call()
            got.append("no error")
        except amnet.AMContextError as e:
            got.append(f"AMContextError: {e}")
    _INSIDE[tok.endpoint.rank] = got


def bad_input(ep) -> list[str]:
    """Bad arguments raise before anything is sent, and so does a collective called in a
    handler; the team works afterwards."""
    c = ep.coll.world
    out = []
    ep.register_handlers([h_coll_inside])
    _PENDING[ep.rank] = c.barrier_nb()
    c.barrier()  # every rank has its handle before any handler runs
    ep.request_short((ep.rank + 1) % ep.size, h_coll_inside)
    ep.wait_until(lambda: ep.rank in _INSIDE)
    _PENDING.pop(ep.rank).wait()  # outside the handler it completes
    out += _INSIDE[ep.rank]
    f8 = np.zeros(4)
    calls = [
        lambda: c.broadcast(np.zeros(0, np.uint8)),  # nbytes 0
        lambda: c.broadcast(f8, f8, nbytes=-3),
        lambda: c.gather_all(np.zeros(5, np.uint8), np.zeros(2, np.uint8)),  # wrong size
        lambda: c.permute(f8, f8, [0] * c.size),  # not a permutation
        lambda: c.reduce_all(f8, f8, "SUM"),  # unknown op
        lambda: c.reduce_all(f8, f8, XOR),  # bitwise on floats
        lambda: c.broadcast(f8, f8, algorithm="smoke-signals"),
        lambda: c.broadcast(f8, f8, root=c.size),
        lambda: c.broadcast(np.zeros(4)[::2], f8[:2]),  # not contiguous
        lambda: c.broadcast(1 << 40, 0, nbytes=8),  # offset past the segment
        lambda: c.reduce_all(np.zeros(3), f8, ADD),  # dst does not match src
        lambda: c.reduce_all(f8, f8, FUNC),  # FUNC without func
    ]
    for call in calls:
        try:
            call()
            out.append("no error")
        except (ValueError, TypeError) as e:
            out.append(f"{type(e).__name__}: {e}")
    v = np.zeros(1, np.int64)
    c.reduce_all(v, np.ones(1, np.int64), ADD)
    assert v[0] == c.size
    return out


def picked(ep) -> list[str]:
    """The algorithms chosen, with nothing named, for a broadcast, a gather-to-all and an
    exchange of 8 bytes."""
    from amnet.coll._algos import Args

    c = ep.coll
    return [c.pick(c.world, Args(w, 8), None) for w in ("broadcast", "gather_all",
                                                         "exchange")]


def one_member_wrong(ep) -> list[str]:
    """Only one member errs -- its arguments, or its reduction function part way -- and a
    mismatched call in flight fails from its own handle: nobody hangs, the team works."""
    c = ep.coll.world
    out = []
    try:  # rank 1 alone passes a destination of the wrong size
        c.gather_all(np.zeros(4 * c.size + (ep.rank == 1), np.uint8), np.zeros(4, np.uint8))
        out.append("no error")
    except (ValueError, amnet.CollectiveMismatch) as e:
        out.append(f"{type(e).__name__}: {e}")

    def fussy(a, b):
        if ep.rank == 0:  # in a tree of 3, member 0 combines, 1 and 2 only send
            raise ValueError("rank 0 refuses to combine")
        return np.maximum(a, b)

    try:  # rank 0's function raises part way through the reduction
        c.reduce_all(np.zeros(2, np.int64), np.arange(2, dtype=np.int64), FUNC, func=fussy,
                     algorithm="tree")
        out.append("no error")
    except (ValueError, amnet.AMNetError) as e:
        out.append(f"{type(e).__name__}: {e}")
    other = ep.coll.node
    h = c.broadcast_nb(np.zeros(4, np.uint8), np.zeros(4, np.uint8), root=min(ep.rank, 1))
    other.barrier()  # the mismatch above is not raised here ...
    try:
        h.wait()  # ... but here (or, checked lazily, on a root: at the end of its next call)
        out.append("no error")
    except amnet.CollectiveMismatch as e:
        out.append(f"handle: {type(e).__name__}")
    ep.barrier()  # the check's messages in
    time.sleep(0.3)
    ep.poll()
    v = np.zeros(1, np.int64)
    try:
        c.reduce_all(v, np.ones(1, np.int64), ADD)
    except amnet.CollectiveMismatch as e:
        out.append(f"next: {type(e).__name__}")
    c.reduce_all(v, np.ones(1, np.int64), ADD)
    out.append(str(int(v[0])))
    return out


def _first_call(T, what: str, alg: str, salt: int) -> None:
    """One call of collective ``what`` with algorithm ``alg`` on team T, checked."""
    P, me, n = T.size, T.index, 24
    if what == "broadcast":
        src = _data(salt % P, n, salt)
        dst = np.zeros(n, np.uint8)
        T.broadcast(dst, src if me == salt % P else None, root=salt % P, algorithm=alg)
        want = src
    elif what in ("scatter", "gather"):
        root = salt % P
        if what == "scatter":
            src = np.concatenate([_data(i, n, salt) for i in range(P)])
            dst = np.zeros(n, np.uint8)
            T.scatter(dst, src if me == root else None, root=root, algorithm=alg)
            want = _data(me, n, salt)
        else:
            dst = np.zeros(n * P, np.uint8)
            T.gather(dst if me == root else None, _data(me, n, salt), root=root, algorithm=alg)
            want = np.concatenate([_data(i, n, salt) for i in range(P)]) if me == root else dst
    elif what == "gather_all":
        dst = np.zeros(n * P, np.uint8)
        T.gather_all(dst, _data(me, n, salt), algorithm=alg)
        want = np.concatenate([_data(i, n, salt) for i in range(P)])
    elif what == "exchange":
        src = np.concatenate([_data(me * P + j, n, salt) for j in range(P)])
        dst = np.zeros(n * P, np.uint8)
        T.exchange(dst, src, algorithm=alg)
        want = np.concatenate([_data(i * P + me, n, salt) for i in range(P)])
    elif what == "permute":
        perm = [(i + 1 + salt) % P for i in range(P)]
        dst = np.zeros(n, np.uint8)
        T.permute(dst, _data(me, n, salt), perm, algorithm=alg)
        want = _data(perm.index(me), n, salt)
    elif what in ("reduce", "reduce_all", "prefix_reduce"):
        src = np.array([me + 1 + salt], np.int64)
        dst = np.zeros(1, np.int64)
        if what == "reduce":
            T.reduce(dst, src, ADD, root=salt % P, algorithm=alg)
            upto = P if me == salt % P else None
        elif what == "reduce_all":
            T.reduce_all(dst, src, ADD, algorithm=alg)
            upto = P
        else:
            T.prefix_reduce(dst, src, ADD, algorithm=alg)
            upto = me + 1
        want = dst if upto is None else np.array([sum(range(1, upto + 1)) + upto * salt])
    else:
        T.barrier(algorithm=alg)
        return
    assert np.array_equal(dst, want), (T.name, me, what, alg, salt, dst, want)


def split_then_call(ep, rounds: int) -> int:
    """Each round splits the world into two teams and calls one collective on the new team at
    once (every collective with every algorithm in turn): a member's first message on the
    team may reach a member that is still finishing the split. Returns the calls made."""
    pairs = [(what, alg) for what, algs in ALGORITHMS.items() for alg in algs]
    world = ep.coll.world
    calls = 0
    for r in range(rounds):
        what, alg = pairs[r % len(pairs)]
        T = world.split(ep.rank % 2, key=-ep.rank if r % 2 else ep.rank)
        _first_call(T, what, alg, r)
        calls += 1
    world.barrier()
    return calls


def _call(T, mode: int, name: str, *args, **kw) -> None:
    """``T.name(*args)``: blocking (mode 0) or its non-blocking form, waited for (1)."""
    if mode == 1:
        getattr(T, name + "_nb")(*args, **kw).wait()
    else:
        getattr(T, name)(*args, **kw)


def small_defaults(ep, rounds: int = 12) -> int:
    """Small calls on the default algorithm (``direct`` on teams of up to 4 within reach,
    driven by amnet.coll._fast), each member taking the fast path or the general one by
    turns -- blocking on numpy arrays (fast), the non-blocking form, or arguments the fast
    path leaves to the general one (bytes at the root) -- so that members on both paths
    meet in one call; every fourth round with a world barrier in flight on every member
    (the general path for all); on the world, a split team in reverse order and the node's
    team. Returns how many calls were checked."""
    c = ep.coll
    teams = [c.world, c.world.split(ep.rank % 2, key=-ep.rank), c.node]
    ufunc = {ADD: np.add, MAX: np.maximum, XOR: np.bitwise_xor, LOGOR: np.logical_or}
    calls = 0
    for rnd in range(rounds):
        h = c.world.barrier_nb() if rnd % 4 == 3 else None
        for T in teams:
            P, me = T.size, T.index
            mode = (rnd + me) % 3
            n = (8, 64, 3, 512)[rnd % 4]
            root = rnd % P
            src = _data(root, n, rnd)
            dst = np.zeros(n, np.uint8)
            give = (src.tobytes() if mode == 2 else src) if me == root else None
            _call(T, mode, "broadcast", dst, give, root=root)
            assert np.array_equal(dst, src), (T.name, me, "broadcast", rnd, mode)
            mine = _data(me, n, rnd).reshape(-1, 1) if n % 2 else _data(me, n, rnd)
            got = np.zeros((P, n), np.uint8)  # 2-D: the fast path takes any C-contiguous shape
            _call(T, mode, "gather_all", got, mine)
            want = np.stack([_data(i, n, rnd) for i in range(P)])
            assert np.array_equal(got, want), (T.name, me, "gather_all", rnd, mode)
            for op, dt in ((ADD, np.float64), (MAX, np.int32), (XOR, np.uint16),
                           (LOGOR, np.bool_)):
                k = max(1, n // 8)
                vals = [((_data(i, k, rnd).astype(np.int64) % 5) > 2 if dt is np.bool_ else
                         _data(i, k, rnd)).astype(dt) for i in range(P)]
                out = np.zeros(k, dt)
                _call(T, mode, "reduce_all", out, vals[me], op)
                model = vals[0].copy()
                for v in vals[1:]:
                    model = ufunc[op](model, v).astype(dt)
                assert np.array_equal(out, model), (T.name, me, "reduce_all", op, rnd, mode)
            _call(T, mode, "barrier")
            calls += 7
        if h is not None:
            h.wait()
    ep.barrier()
    return calls


def node_area(ep) -> dict:
    """The collectives the node area carries, on the world, the node team and a split team
    (odd and even ranks, reverse order), with blocks of one round and blocks past the data
    area (several rounds), blocking and four in flight at once, each checked against numpy.
    Returns, per team, whether it shares memory and its default algorithms."""
    from amnet.pshm import COLL_DATA

    c = ep.coll
    out = {}
    teams = [("world", c.world), ("node", c.node),
             ("split", c.world.split(ep.rank % 2, key=-ep.rank))]
    for name, T in teams:
        P, me = T.size, T.index
        out[name] = [T.shares_memory, T.default_algorithm("broadcast"),
                     T.default_algorithm("barrier"), T.default_algorithm("exchange", 8)]
        if T._local is not None:  # its waits spin first only where ranks have cores to spare
            assert T._local.area.spins is (ep.wait_mode != "block"), (name, ep.wait_mode)

        def ok(cond, *what, name=name, me=me):
            assert cond, (name, me, *what)

        for n in (8, COLL_DATA + 24):
            for root in range(P):
                src = _data(root, n, 1)
                dst = np.zeros(n, np.uint8)
                T.broadcast(dst, src if me == root else None, root=root)
                ok(np.array_equal(dst, src), "broadcast", n, root)
            r = P - 1
            whole = np.concatenate([_data(i, n, 2) for i in range(P)])
            dst = np.zeros(n, np.uint8)
            T.scatter(dst, whole if me == r else None, root=r)
            ok(np.array_equal(dst, _data(me, n, 2)), "scatter", n)
            dst = np.zeros(n * P, np.uint8)
            T.gather(dst if me == 0 else None, _data(me, n, 2), root=0)
            if me == 0:
                ok(np.array_equal(dst, whole), "gather", n)
            dst = np.zeros(n * P, np.uint8)
            T.gather_all(dst, _data(me, n, 2))
            ok(np.array_equal(dst, whole), "gather_all", n)
            b = n // P + 64 if n > 8 else n  # P blocks of it: past the data area too
            src = np.concatenate([_data(me * P + j, b, 3) for j in range(P)])
            dst = np.zeros(b * P, np.uint8)
            T.exchange(dst, src)
            ok(np.array_equal(dst, np.concatenate([_data(i * P + me, b, 3)
                                                   for i in range(P)])), "exchange", n)
            k = n // 8
            x = np.arange(k, dtype=np.int64) * (me + 1)
            d = np.zeros(k, np.int64)
            T.reduce(d, x, ADD, root=P // 2)
            if me == P // 2:
                ok(np.array_equal(d, np.arange(k) * sum(range(1, P + 1))), "reduce", n)
            f = np.linspace(0, 1, k) + me
            d = np.zeros(k)
            T.reduce_all(d, f, MAX)
            ok(np.array_equal(d, np.linspace(0, 1, k) + (P - 1)), "reduce_all max", n)
            T.reduce_all(d, f, ADD)
            want = np.linspace(0, 1, k)
            for i in range(1, P):  # member order, as every member of shm folds
                want = want + (np.linspace(0, 1, k) + i)
            # (hier adds its nodes' sums: the same up to rounding)
            ok(np.array_equal(d, want) if T.shares_memory else np.allclose(d, want),
               "reduce_all add", n)
            T.barrier()
        # in place (the source is the destination, or a block of it)
        x = np.arange(4, dtype=np.int64) + me
        T.reduce_all(x, x, ADD)
        ok(np.array_equal(x, sum(np.arange(4) + i for i in range(P))), "reduce_all in place")
        y = np.zeros(P, np.int64)
        y[me] = 3 * me + 1
        T.gather_all(y, y[me:me + 1])
        ok(np.array_equal(y, 3 * np.arange(P) + 1), "gather_all in place")
        # four calls in flight on the area, completed in reverse order
        a = np.zeros(4, np.int64)
        g = np.zeros(P, np.int64)
        bd = np.zeros(COLL_DATA + 8, np.uint8)
        bsrc = _data(0, COLL_DATA + 8, 4)
        hs = [T.reduce_all_nb(a, np.arange(4, dtype=np.int64) + me, ADD), T.barrier_nb(),
              T.gather_all_nb(g, np.array([me], np.int64)),
              T.broadcast_nb(bd, bsrc if me == 0 else None, root=0)]
        for h in reversed(hs):
            h.wait()
        ok(np.array_equal(a, sum(np.arange(4) + i for i in range(P))), "nb reduce_all")
        ok(np.array_equal(g, np.arange(P)), "nb gather_all")
        ok(np.array_equal(bd, bsrc), "nb broadcast")
    return out


def destroy_and_split(ep, rounds: int = 20) -> list:
    """Split a team, use it on its node-area slot, destroy it, ``rounds`` times (more teams
    than a rank has slots); a destroyed team refuses calls, the world cannot be destroyed.
    Returns, per round, whether the new team shared memory."""
    c = ep.coll
    got = []
    for r in range(rounds):
        T = c.world.split(r % 2 if ep.size > 2 else 0, key=(r * 7 + ep.rank) % ep.size)
        got.append(T.shares_memory)
        src = np.full(3, r + T.index, np.int64)
        dst = np.zeros(3, np.int64)
        T.reduce_all(dst, src, ADD)
        assert (dst == sum(r + i for i in range(T.size))).all(), (r, dst)
        T.broadcast(dst, src if T.index == 0 else None, root=0)
        assert (dst == r).all()
        T.destroy()
        for call in (T.barrier, T.destroy):
            try:
                call()
                raise AssertionError(f"{call.__name__} on a destroyed team did not raise")
            except ValueError:
                pass
    try:
        c.world.destroy()
        raise AssertionError("the world was destroyed")
    except ValueError:
        pass
    c.world.barrier()
    return got
