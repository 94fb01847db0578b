"""Jobs for tests/test_aio.py: coroutines that amnet.aio.run runs on every rank.

Each job returns what its rank saw for the test to assert on. rpc functions and handlers are
module-level (every rank registers the same table: :data:`FNS`)."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import numpy as np

import amnet
import amnet.aio
from amnet.coll import ADD

STATE: dict[int, dict] = {}  # rank -> what its handlers and deferred work saw


def add(a, b):
    return a + b


def boom(x):
    raise ValueError(f"boom {x}")


def h_kick(tok, x):
    """A Short request whose work runs on the rank's loop after the handler returned: it
    sends an rpc to a third rank (a handler may not) and records the answer."""
    amnet.aio.defer(tok, _kicked, tok.source, x)


async def _kicked(src, x):
    ep = amnet.endpoint()
    third = (ep.rank + 1) % ep.size
    got = await ep.rpc(third, add, x, 1000)
    STATE.setdefault(ep.rank, {}).setdefault("kicked", []).append(
        (src, x, got, threading.get_ident() == STATE[ep.rank]["loop_thread"]))


def h_defer_fails(tok):
    amnet.aio.defer(tok, _fails)


async def _fails():
    raise KeyError("deferred work failed")


FNS = [add, boom, h_kick, h_defer_fails]


def _ep():
    ep = amnet.endpoint()
    if ep is None:
        return amnet.init(FNS)
    if ep.rank not in STATE:  # amnet.run made the endpoint: the table, once per rank
        ep.register_handlers(FNS)
        STATE[ep.rank] = {}
    return ep


def _run(main, *args):
    ep = _ep()
    STATE[ep.rank] = {"loop_thread": None}

    async def wrapped(ep):
        STATE[ep.rank]["loop_thread"] = threading.get_ident()
        return await main(ep, *args)
    return amnet.aio.run(wrapped)


# -- jobs ------------------------------------------------------------------------------------
def basics(_ep_unused=None) -> dict:
    """rpc, get, put, a remote error, gather of many, a collective's and a region's handle."""
    async def main(ep):
        out = {}
        peer = (ep.rank + 1) % ep.size
        out["rpc"] = await ep.rpc(peer, add, ep.rank, 10)
        ep.segment[:8] = ep.rank + 1
        await ep.put_nb(peer, 64, np.full(8, ep.rank + 7, np.uint8))
        ep.barrier()
        out["get"] = bytes(await ep.get_nb(peer, 0, 8))
        out["put_landed"] = bytes(ep.segment[64:72])
        try:
            await ep.rpc(peer, boom, ep.rank)
            out["error"] = None
        except ValueError as e:
            out["error"] = (str(e), getattr(e, "__notes__", []))
        calls = [(p, i) for i in range(250) for p in range(ep.size)]
        got = await asyncio.gather(*(ep.rpc(p, add, i, p) for p, i in calls))
        out["gather_ok"] = got == [i + p for p, i in calls]
        out["gather_n"] = len(got)
        total = np.zeros(1, np.int64)
        await ep.coll.world.reduce_all_nb(total, np.array([ep.rank + 1], np.int64), ADD)
        out["reduce"] = int(total[0])
        with ep.access_region() as region:
            ep.put_nbi(peer, 128, b"region!!")
        await region.handle
        ep.barrier()
        out["region"] = bytes(ep.segment[128:136])
        return out
    return _run(main)


def layers(_=None) -> dict:
    """Awaits of the layers' handles: VIS vector put and get, upc_rt's memget_nb and
    memput_nb, an extension-free region: their results as the blocking forms give them."""
    import upc_rt as upc

    async def main(ep):
        out = {}
        far = (ep.rank + ep.size // 2) % ep.size  # on the other node
        await ep.vis.put_vector_nb(far, [(1024, 4), (1100, 4)], [b"ABCD", b"EFGH"])
        ep.barrier()
        a, b = bytearray(4), bytearray(4)
        await ep.vis.get_vector_nb(far, [a, b], [(1024, 4), (1100, 4)])
        out["vis"] = (bytes(a), bytes(b))
        upc.init()
        me, T = upc.MYTHREAD, upc.THREADS
        A = upc.all_alloc(T, 64)
        await upc.memput_nb(A + 64 * ((me + 1) % T), bytes([me + 1]) * 64, 64)
        upc.barrier()
        buf = bytearray(64)
        await upc.memget_nb(buf, A + 64 * ((me + T - 1) % T), 64)
        out["upc"] = bytes(buf)
        upc.barrier()
        return out
    return _run(main)


def cancel_and_timeout(_=None) -> dict:
    """The ranks of the second node compute for 1 s without calling amnet (their handlers
    wait); rank 0's awaits of an rpc and a put to the last rank time out and are cancelled
    mid-flight; both complete later, the put's bytes land, and a cancelled rpc that fails is
    reported to the loop's handler."""
    async def main(ep):
        out = {}
        if ep.rank == 0:
            reported = []
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(lambda lp, ctx: reported.append(
                (ctx["message"], type(ctx.get("exception")).__name__)))
            ep.barrier()
            await asyncio.sleep(0.1)  # node 1 has left the barrier and computes
            last = ep.size - 1
            h_rpc = ep.rpc(last, add, 1, 2)
            h_put = ep.put_nb(last, 256, np.full(16, 9, np.uint8))
            h_bad = ep.rpc(last, boom, 5)
            t0 = time.monotonic()
            for name, h in (("rpc", h_rpc), ("put", h_put)):
                try:
                    await asyncio.wait_for(amnet.aio.as_future(h), 0.1)
                    out[name] = "completed"
                except TimeoutError:
                    out[name] = "timeout"
            task = asyncio.ensure_future(_await(h_bad))
            await asyncio.sleep(0.05)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                out["bad"] = "cancelled"
            out["timed_out_after"] = time.monotonic() - t0
            out["rpc_later"] = await h_rpc  # the operation went on: it completes
            await h_put
            for _ in range(100):
                if reported:
                    break
                await asyncio.sleep(0.01)
            out["reported"] = reported
        else:
            ep.barrier()
            if ep.node == 1:
                time.sleep(1.0)  # computing: no progress on this node meanwhile
        ep.barrier()
        out["landed"] = bytes(ep.segment[256:272]) if ep.rank == ep.size - 1 else None
        return out
    return _run(main)


async def _await(h):
    return await h


def deferred(_=None) -> dict:
    """Every rank kicks the next one; the kicked rank's handler defers a coroutine that sends
    an rpc to a third rank (on its loop, after the handler returned)."""
    async def main(ep):
        ep.barrier()
        nxt = (ep.rank + 1) % ep.size
        ep.request_short(nxt, h_kick, 100 + ep.rank)
        for _ in range(3000):
            if STATE[ep.rank].get("kicked"):
                break
            await asyncio.sleep(0.001)
        ep.barrier()
        return STATE[ep.rank].get("kicked")
    return _run(main)


def deferred_failure(_=None) -> str:
    """A coroutine a handler deferred raises: the rank's amnet.aio.run raises it."""
    async def main(ep):
        ep.barrier()
        if ep.rank == 0:
            ep.request_short(0, h_defer_fails)
        await asyncio.sleep(5)
        return "not ended"
    try:
        return _run(main)
    except KeyError as e:
        return f"raised {e}"


def idle_cpu(_=None) -> dict:
    """Rank 0 awaits for 1 s on an idle job; the others then send it rpcs it answers while
    it awaits. CPU seconds of rank 0's process during the await, and the answers' times."""
    async def main(ep):
        out = {}
        ep.barrier()
        if ep.rank == 0:
            c0, t0 = time.process_time(), time.monotonic()
            await asyncio.sleep(1.0)
            out["cpu"] = time.process_time() - c0
            out["wall"] = time.monotonic() - t0
        else:
            await asyncio.sleep(1.2)  # rank 0's idle second is over
        ep.barrier()
        if ep.rank == 0:  # now serving while it awaits
            c0 = time.process_time()
            await asyncio.sleep(0.6)
            out["cpu_serving"] = time.process_time() - c0
        else:
            await asyncio.sleep(0.1)
            t0 = time.monotonic()
            out["answers"] = [await ep.rpc(0, add, ep.rank, i) for i in range(20)]
            out["answer_s"] = (time.monotonic() - t0) / 20
        ep.barrier()
        return out
    return _run(main)


def promises(_=None) -> dict:
    """as_future, on_complete and a Promise counting puts and anonymous dependencies."""
    async def main(ep):
        peer = (ep.rank + 1) % ep.size
        fut = amnet.aio.as_future(ep.rpc(peer, add, 5, 6))
        seen = []
        amnet.aio.on_complete(ep.rpc(peer, add, 1, 1), lambda f: seen.append(f.result()))
        p = amnet.aio.Promise()
        for k in range(20):
            p.require(ep.put_nb(peer, 512 + 8 * k, np.full(8, k + 1, np.uint8)))
        p.require_anonymous(2)
        p.fulfill_anonymous(2)
        done = p.finalize()
        await done
        out = {"future": await fut, "outstanding": p.outstanding}
        bad = amnet.aio.Promise()
        bad.require(ep.rpc(peer, boom, 3))
        try:
            await bad.finalize()
            out["bad"] = None
        except ValueError as e:
            out["bad"] = str(e)
        try:
            bad.require(ep.rpc(peer, add, 0, 0))
        except amnet.AMContextError as e:
            out["after_finalize"] = str(e)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.001)
        out["callback"] = seen
        ep.barrier()
        out["puts"] = bytes(ep.segment[512:672]) == b"".join(
            bytes([k + 1]) * 8 for k in range(20))
        return out
    return _run(main)


def when_all(_=None) -> dict:
    """amnet.aio.when_all: 300 rpcs in order; handles of every kind and other awaitables
    mixed; a remote error at the await (the others complete); return_exceptions; a timeout
    while the other node computes (the operations go on; a failing one is reported)."""
    async def main(ep):
        out = {}
        n = ep.size
        peers = [(ep.rank + 1 + i % (n - 1)) % n for i in range(300)]
        out["many"] = await amnet.aio.when_all(
            *(ep.rpc(p, add, ep.rank, i) for i, p in enumerate(peers))) == [
            ep.rank + i for i in range(300)]
        right = (ep.rank + 1) % n
        with ep.access_region() as region:
            ep.put_nbi(right, 1024, np.full(8, ep.rank + 1, np.uint8))

        async def coro():
            await asyncio.sleep(0.01)
            return "coro"
        fut = asyncio.get_running_loop().create_future()
        fut.set_result("future")
        total = np.zeros(1, np.int64)
        got = await amnet.aio.when_all(
            ep.get_nb(ep.rank, 0, 4), ep.put_nb(right, 1040, b"abcd"), region.handle,
            ep.rpc(right, add, 2, 3), coro(), fut,
            ep.coll.world.reduce_all_nb(total, np.ones(1, np.int64), ADD))
        out["mixed"] = [bytes(got[0]), *got[1:6], int(total[0])]
        out["empty"] = await amnet.aio.when_all()
        h_ok = ep.rpc(right, add, 1, 1)
        try:
            await amnet.aio.when_all(ep.rpc(right, boom, 7), h_ok)
            out["error"] = None
        except ValueError as e:
            out["error"] = (str(e), any(f"on rank {right}" in note
                                        for note in getattr(e, "__notes__", [])))
        out["other_went_on"] = await h_ok
        got = await amnet.aio.when_all(ep.rpc(right, boom, 8), ep.rpc(right, add, 4, 4),
                                       return_exceptions=True)
        out["returned"] = [type(got[0]).__name__, str(got[0]), got[1]]
        try:
            amnet.aio.when_all(ep.rpc(right, add, 0, 0), "not awaitable")
        except TypeError as e:
            out["type_error"] = str(e)
        ep.barrier()
        if ep.rank == 0:
            reported = []
            asyncio.get_running_loop().set_exception_handler(lambda lp, ctx: reported.append(
                (ctx["message"], type(ctx.get("exception")).__name__)))
            await asyncio.sleep(0.1)  # node 1 has left the barrier and computes
            last = ep.size - 1
            hs = [ep.rpc(last, add, 10, 1), ep.rpc(last, boom, 9)]

            async def sleeper():
                try:
                    await asyncio.sleep(5)
                except asyncio.CancelledError:
                    out["sleeper"] = "cancelled"
                    raise
            both = asyncio.gather(
                amnet.aio.when_all(*hs, sleeper()),
                amnet.aio.when_all(ep.rpc(last, boom, 10), return_exceptions=True))
            try:
                await asyncio.wait_for(both, 0.1)
                out["timeout"] = "completed"
            except TimeoutError:
                out["timeout"] = "timeout"
            except ValueError:  # one node: nobody computes, the failing rpc ended it
                out["timeout"] = "failed"
            out["later"] = await hs[0]
            for _ in range(100):
                if len(reported) >= 2:
                    break
                await asyncio.sleep(0.01)
            out["reported"] = sorted(reported)
        elif ep.node == 1:
            time.sleep(1.0)  # computing: no progress on this node meanwhile
        ep.barrier()
        out["landed"] = bytes(ep.segment[1024:1032]) == bytes([(ep.rank - 1) % n + 1]) * 8 \
            and bytes(ep.segment[1040:1044]) == b"abcd"
        return out
    return _run(main)


def quiet_replies(_=None) -> dict:
    """Rank 0's coroutine awaits when_all of 300 rpcs to the others, 10 times, while they serve
    in a blocking barrier: how many doorbells each rank rang meanwhile, and its replies."""
    async def main(ep):
        ep.barrier()
        before = ep.statistics().pshm.doorbells
        if ep.rank == 0:
            peers = [1 + i % (ep.size - 1) for i in range(300)]
            for _ in range(10):
                got = await amnet.aio.when_all(*[ep.rpc(p, add, i, 0)
                                                 for i, p in enumerate(peers)])
                assert got == list(range(300))
        ep.barrier()  # the others serve in it
        return {"rang": ep.statistics().pshm.doorbells - before,
                "replies": 0 if ep.rank == 0 else 10 * 300 // (ep.size - 1)}
    return _run(main)


def misuse(_=None) -> dict:
    """Awaiting without amnet.aio, nested run, defer to a rank without a loop."""
    ep = _ep()
    out = {}

    async def plain():
        return await ep.rpc(ep.size - 1, add, 1, 1)  # the last rank: computing meanwhile
    ep.barrier()
    if ep.rank == ep.size - 1:
        time.sleep(1.0)  # no progress here: the rpcs to it cannot complete before the await
    else:
        time.sleep(0.2)  # the last rank has left the barrier (where it served) and sleeps
        try:
            asyncio.run(plain())
        except amnet.AMContextError as e:
            out["plain_loop"] = str(e)
    ep.barrier()  # the rpcs were answered in it

    async def nested(ep):
        try:
            amnet.aio.run(nested)
        except amnet.AMContextError as e:
            return str(e)
    out["nested"] = amnet.aio.run(nested)
    try:
        amnet.aio.defer(ep.rank, lambda: None)
    except amnet.AMContextError as e:
        out["defer_no_loop"] = str(e)
    ep.barrier()
    return out


def killed(_=None) -> None:
    """The last rank kills itself with SIGKILL while the others await an rpc to it."""
    import signal

    async def main(ep):
        ep.barrier()
        if ep.rank == ep.size - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(0.2)
        await ep.rpc(ep.size - 1, add, 1, 1)
        await asyncio.sleep(30)
    _run(main)
