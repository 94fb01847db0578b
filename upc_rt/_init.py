"""``upc.init()``: a rank-thread's start, which makes the runtime's parts (the shmem
network, the cache, the nonblocking scheduler) as the configuration asks. Above the modules
it puts together, so that none of them imports it.
"""

from __future__ import annotations

import amnet

from ._cache import Cache
from ._net import ShmemNet
from ._rt import bind, bound


def init(auto_nb: bool | None = None, cache: bool | None = None,
         runtime: str | None = None) -> None:
    """Start UPC on this rank-thread (collective): ``amnet.init()`` unless the rank already
    called it, then a barrier. ``upc.MYTHREAD`` and ``upc.THREADS`` are right afterwards,
    in every rank-thread.

    Args:
        auto_nb: route relaxed memget/memput/memcpy/memset to other nodes through the
            automatic nonblocking scheduler, ``amnet.nbcomm.Scheduler`` (None: the
            ``AMNET_AUTO_NB`` setting); every other access to other nodes tells it, and
            every synchronization point of upc_rt is one of its synchronization events.
        cache: turn the remote-reference cache on (None: the ``AMNET_UPC_CACHE`` setting).
        runtime: ``"amnet"`` (upc_rt on amnet directly) or ``"shmem"`` (every remote
            operation a public call of shmem_rt, the mapping of *An OpenSHMEM runtime for
            UPC*; docs/upc.md); None: the ``AMNET_UPC_RUNTIME`` setting.

    Raises:
        amnet.InitError: upc.init() was already called on this rank-thread.
        amnet.ConfigError: an unknown runtime, or runtime "shmem" with the cache or
            auto_nb (they work on amnet's messages only).
    """
    if bound() is not None:
        raise amnet.InitError("upc.init() was called twice on this thread; call it once")
    ep = amnet.endpoint() or amnet.init()
    rt = ep.extension("upc")
    if runtime is None:
        runtime = ep.config.upc_runtime
    if runtime not in ("amnet", "shmem"):
        raise amnet.ConfigError(f"upc.init(runtime={runtime!r}): the runtime is 'amnet' or "
                                "'shmem'")
    if runtime == "shmem":
        asked = [w for w, v, c in (("cache", cache, ep.config.upc_cache),
                                   ("auto_nb", auto_nb, ep.config.auto_nb))
                 if (c if v is None else v)]
        if asked:
            raise amnet.ConfigError(
                f"upc.init(): runtime 'shmem' cannot run {' and '.join(asked)} (the cache "
                "and the nonblocking scheduler work on amnet's own messages); turn "
                f"{'them' if len(asked) > 1 else 'it'} off (AMNET_UPC_CACHE=0, "
                "AMNET_AUTO_NB=0) or use runtime 'amnet'")
        rt.shm = rt.net = ShmemNet(rt)
        rt.segment_size = rt.shm.heap_size  # the heaps' state lives in the region
        auto_nb = cache = False
    if auto_nb is None:
        auto_nb = bool(ep.config.auto_nb)
    if auto_nb:
        from amnet.nbcomm import Scheduler

        rt.nb = Scheduler(ep)
    if cache is None:
        cache = bool(ep.config.upc_cache)
    if cache:
        rt.cache = Cache(rt, ep.config.upc_cache_blocks, ep.config.upc_cache_block_size)
    if not all(ep.is_local(t) for t in range(rt.THREADS)):
        # attentiveness: a thread computing on shared data serves other nodes' requests
        # (MuPC's communication thread, upc_poll() in Berkeley UPC); within a node nothing
        # waits on the owner (its memory is read and written directly)
        rt.poll_every = int(ep.config.upc_poll_every)
    rt.initialized = True
    bind(rt)
    rt.net.barrier()
