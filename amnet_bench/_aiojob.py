"""Jobs of ``amnet-bench am``'s aio section (:mod:`amnet_bench._aio`): an awaited 8 B get and
Short rpc beside their blocking forms, 1000 rpcs in flight awaited with ``asyncio.gather``
and ``amnet.aio.when_all`` beside the same issued as handles and waited for with
``amnet.wait_all``, and the CPU an
idle awaiting rank uses.

Rank 0 measures; the other ranks serve in a blocking ``ep.wait_until`` (the same peer for
both forms) until rank 0's stop message. The forms alternate batch by batch in one process,
so both see the same machine.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Any

import amnet
import amnet.aio

_STOP: dict[int, bool] = {}


def aio_noop(x: int) -> int:
    return x


def aio_stop(tok: Any) -> None:
    _STOP[tok.rank] = True


HANDLERS = [aio_noop, aio_stop]


def _on_rank0(ep: Any, main: Any, after: Any = None) -> Any:
    """Run ``main`` with amnet.aio.run on rank 0 while the others serve in a blocking
    ``ep.wait_until`` until rank 0 stops them; rank 0's result (None elsewhere), updated
    with ``after()``'s (run on rank 0 once the loop let go of the rank)."""
    ep.register_handlers(HANDLERS)
    _STOP[ep.rank] = False
    ep.barrier()
    if ep.rank != 0:
        ep.wait_until(lambda: _STOP.get(ep.rank, False))
        return None
    res = amnet.aio.run(main)
    if after is not None:
        res.update(after())
    for r in range(1, ep.size):
        ep.request_short(r, aio_stop)
    return res


async def _pair(blocking: Any, awaited: Any, batch: int) -> tuple[float, float]:
    """``batch`` calls of ``blocking()``, then ``batch`` awaits of ``awaited()``: seconds per
    call of each."""
    t0 = time.perf_counter()
    for _ in range(batch):
        blocking()
    t1 = time.perf_counter()
    for _ in range(batch):
        await awaited()
    t2 = time.perf_counter()
    return (t1 - t0) / batch, (t2 - t1) / batch


def _three_forms(issue: Any) -> list[tuple[str, Any]]:
    """The handles ``issue()`` returns waited for with ``amnet.wait_all``, awaited with
    ``asyncio.gather`` and with ``amnet.aio.when_all``: every form issues them the same way,
    only the waits differ."""
    async def handles() -> list[Any]:
        return amnet.wait_all(issue())

    async def gathered() -> list[Any]:
        return await asyncio.gather(*issue())

    async def all_of() -> list[Any]:
        return await amnet.aio.when_all(*issue())
    return [("handles", handles), ("gather", gathered), ("when_all", all_of)]


async def _take_turns(forms: list[tuple[str, Any]], rounds: int, out: dict[str, list[float]],
                      prefix: str = "", want: Any = None, floor: Any = None) -> None:
    """``rounds`` rounds (after one untimed) of every form, each first in turn (a multiple
    of 3 rounds puts each first equally often); each form's seconds appended to
    ``out[prefix + name]``; ``want``: what every form must return; ``floor``: a coroutine
    function run after each round that returns its own seconds (``out["floor"]``)."""
    for k in range(rounds + 1):
        for name, form in forms[k % 3:] + forms[:k % 3]:
            t0 = time.perf_counter()
            got = await form()
            t1 = time.perf_counter()
            assert want is None or got == want
            if k:
                out.setdefault(prefix + name, []).append(t1 - t0)
        if floor is not None:
            f = await floor()
            if k:
                out.setdefault("floor", []).append(f)


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
                b, a = await _pair(blk, aw, batch)
                out[f"{form} blocking"].append(b)
                out[f"{form} await"].append(a)
            b, a = await _pair(handle_get, floor, batch)
            out["get handle"].append(b)
            out["floor await"].append(a)
        return out

    return _on_rank0(ep, main)


def many_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """``plan["count"]`` rpcs from rank 0 to the others in turn: issued as handles then
    ``amnet.wait_all``, awaited together with ``asyncio.gather``, and with
    ``amnet.aio.when_all``, ``plan["rounds"]`` times, each form first in turn (a multiple
    of 3 rounds puts each first equally often); seconds of each."""
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

    def issue() -> list[Any]:
        return [ep.rpc(p, aio_noop, i) for i, p in enumerate(peers)]

    async def main(ep: Any) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        await _take_turns(_three_forms(issue), rounds, out, want=list(range(count)),
                          floor=floor)
        return out

    def no_loop() -> dict[str, list[float]]:
        """The handles again with no loop attached (the blocking program of today: there a
        reply rings the doorbell only while rank 0 sleeps, with a loop every reply does)."""
        out = []
        for k in range(rounds + 1):
            t0 = time.perf_counter()
            amnet.wait_all(issue())
            if k:
                out.append(time.perf_counter() - t0)
        return {"handles no loop": out}

    return _on_rank0(ep, main, no_loop)


def idle_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """Rank 0 awaits ``plan["seconds"]`` on an idle job: the CPU seconds its process used."""

    async def main(ep: Any) -> dict[str, float]:
        c0, t0 = time.process_time(), time.monotonic()
        await asyncio.sleep(plan["seconds"])
        return {"cpu": time.process_time() - c0, "wall": time.monotonic() - t0}

    return _on_rank0(ep, main)


def rma_aio_job(ep: Any, plan: dict[str, Any]) -> dict[str, Any] | None:
    """The rma suite's aio rows: per size of ``plan["sizes"]``, put and get round trips to
    rank 1, blocking (``ep.put``/``ep.get``) and awaited (``await ep.put_nb``/``get_nb``),
    alternating batch by batch; then ``plan["count"]`` 8 B gets in flight to rank 1 as
    handles + ``amnet.wait_all``, ``amnet.aio.when_all`` and ``asyncio.gather``,
    ``plan["rounds"]`` times, each form first in turn. Seconds per round trip of each
    batch, and per round."""
    batch, batches, warm = plan["batch"], plan["batches"], plan["warmup"]
    count, rounds = plan["count"], plan["rounds"]

    async def main(ep: Any) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for n in plan["sizes"]:
            src, dst = bytearray(n), bytearray(n)
            forms = (("put", partial(ep.put, 1, 0, src), partial(ep.put_nb, 1, 0, src)),
                     ("get", partial(ep.get, 1, 0, n, dst), partial(ep.get_nb, 1, 0, n, dst)))
            for _ in range(warm):
                for _, blk, nb in forms:
                    blk()
                    await nb()
            for _ in range(batches):
                for op, blk, nb in forms:
                    b, a = await _pair(blk, nb, batch)
                    out.setdefault(f"{op} {n} blocking", []).append(b)
                    out.setdefault(f"{op} {n} await", []).append(a)
        offsets = [8 * (i % 512) for i in range(count)]
        await _take_turns(_three_forms(lambda: [ep.get_nb(1, o, 8) for o in offsets]),
                          rounds, out, prefix="gets ")
        return out

    return _on_rank0(ep, main)
