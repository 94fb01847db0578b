"""Jobs of ``amnet-bench am``'s aio section (:mod:`amnet.bench._aio`): an awaited 8 B get and
Short rpc beside their blocking forms, 1000 rpcs in flight awaited with ``asyncio.gather``
beside the same issued as handles and waited for with ``amnet.wait_all``, and the CPU an
idle awaiting rank uses.

Rank 0 measures; the other ranks serve in a blocking ``ep.wait_until`` (the same peer for
both forms) until rank 0's stop message. The forms alternate batch by batch in one process,
so both see the same machine.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import amnet
import amnet.aio

_STOP: dict[int, bool] = {}


def aio_noop(x: int) -> int:
    return x


def aio_stop(tok: Any) -> None:
    _STOP[tok.rank] = True


HANDLERS = [aio_noop, aio_stop]


def _on_rank0(ep: Any, main: Any) -> Any:
    """Run ``main`` with amnet.aio.run on rank 0 while the others serve in a blocking
    ``ep.wait_until`` until rank 0 stops them; rank 0's result (None elsewhere)."""
    ep.register_handlers(HANDLERS)
    _STOP[ep.rank] = False
    ep.barrier()
    if ep.rank != 0:
        ep.wait_until(lambda: _STOP.get(ep.rank, False))
        return None
    res = amnet.aio.run(main)
    for r in range(1, ep.size):
        ep.request_short(r, aio_stop)
    return res


def rtt_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """Per form (get, rpc) and way (blocking, awaited): ``plan["batches"]`` batches of
    ``plan["batch"]`` round trips to rank 1, the ways alternating; seconds per round trip of
    each batch."""
    batch, batches, warm = plan["batch"], plan["batches"], plan["warmup"]

    def blocking_get() -> None:
        ep.get(1, 0, 8)

    def blocking_rpc() -> None:
        ep.rpc(1, aio_noop, 1).wait()

    async def awaited_get() -> None:
        await ep.get_nb(1, 0, 8)

    def handle_get() -> None:
        ep.get_nb(1, 0, 8).wait()

    async def nothing() -> None:
        return None

    async def floor() -> None:  # the await of a coroutine that returns at once
        await nothing()

    async def awaited_rpc() -> None:
        await ep.rpc(1, aio_noop, 1)

    async def main(ep: Any) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {k: [] for k in
                                       ("get blocking", "get await", "rpc blocking",
                                        "rpc await", "get handle", "floor await")}
        for _ in range(warm):
            blocking_get()
            await awaited_get()
            blocking_rpc()
            await awaited_rpc()
        for _ in range(batches):
            for form, blk, aw in (("get", blocking_get, awaited_get),
                                  ("rpc", blocking_rpc, awaited_rpc)):
                t0 = time.perf_counter()
                for _ in range(batch):
                    blk()
                t1 = time.perf_counter()
                for _ in range(batch):
                    await aw()
                t2 = time.perf_counter()
                out[f"{form} blocking"].append((t1 - t0) / batch)
                out[f"{form} await"].append((t2 - t1) / batch)
            t0 = time.perf_counter()
            for _ in range(batch):
                handle_get()
            t1 = time.perf_counter()
            for _ in range(batch):
                await floor()
            t2 = time.perf_counter()
            out["get handle"].append((t1 - t0) / batch)
            out["floor await"].append((t2 - t1) / batch)
        return out

    return _on_rank0(ep, main)


def many_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """``plan["count"]`` rpcs from rank 0 to the others in turn: issued as handles then
    ``amnet.wait_all``, and awaited together with ``asyncio.gather``, alternating
    ``plan["rounds"]`` times; seconds of each."""
    count, rounds = plan["count"], plan["rounds"]
    peers = [1 + i % (ep.size - 1) for i in range(count)]

    async def floor() -> float:
        """asyncio.gather of ``count`` coroutines, each awaiting a future resolved at once
        after: what gather costs with no communication (a task per awaitable)."""
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(count)]

        async def one(f: asyncio.Future) -> Any:
            return await f
        t0 = time.perf_counter()
        g = asyncio.gather(*(one(f) for f in futs))
        await asyncio.sleep(0)
        for i, f in enumerate(futs):
            f.set_result(i)
        await g
        return time.perf_counter() - t0

    async def main(ep: Any) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"handles": [], "gather": [], "floor": []}
        for k in range(rounds + 1):  # the first round warms up
            t0 = time.perf_counter()
            amnet.wait_all([ep.rpc(p, aio_noop, i) for i, p in enumerate(peers)])
            t1 = time.perf_counter()
            got = await asyncio.gather(*(ep.rpc(p, aio_noop, i) for i, p in enumerate(peers)))
            t2 = time.perf_counter()
            assert got == list(range(count))
            f = await floor()
            if k:
                out["handles"].append(t1 - t0)
                out["gather"].append(t2 - t1)
                out["floor"].append(f)
        return out

    return _on_rank0(ep, main)


def idle_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """Rank 0 awaits ``plan["seconds"]`` on an idle job: the CPU seconds its process used."""

    async def main(ep: Any) -> dict[str, float]:
        c0, t0 = time.process_time(), time.monotonic()
        await asyncio.sleep(plan["seconds"])
        return {"cpu": time.process_time() - c0, "wall": time.monotonic() - t0}

    return _on_rank0(ep, main)
