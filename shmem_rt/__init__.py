"""shmem_rt: OpenSHMEM 1.5 on amnet, with shmem4py's Python API.

A program written for shmem4py runs unchanged after ``from shmem4py import shmem`` becomes
``import shmem_rt as shmem``: the same names, argument orders, defaults and numpy handling
(docs/shmem.md maps every routine and says what differs). A PE is an amnet rank, a process
or a rank-thread; ``TEAM_SHARED`` is the PEs of my node and :func:`ptr` a numpy view of a
PE on it. shmem_rt is built only on amnet's public API and extension interface (the
``shmem`` extension, ``ep.atomic``, ``ep.put``/``get``, ``ep.segment_offset``,
``ep.coll``), as a runtime outside amnet would be.

Like shmem4py, which initialises on import, a PE starts on its first shmem_rt call;
``shmem.init()`` says so explicitly. upc_rt runs over it with ``upc.init(runtime="shmem")``.
"""

from ._amo import (AMO, AMO_ADD, AMO_AND, AMO_INC, AMO_OR, AMO_SET, AMO_XOR, atomic_add,
                   atomic_and, atomic_compare_swap, atomic_compare_swap_nbi, atomic_fetch,
                   atomic_fetch_add, atomic_fetch_add_nbi, atomic_fetch_and,
                   atomic_fetch_and_nbi, atomic_fetch_inc, atomic_fetch_inc_nbi,
                   atomic_fetch_nbi, atomic_fetch_op, atomic_fetch_op_nbi, atomic_fetch_or,
                   atomic_fetch_or_nbi, atomic_fetch_xor, atomic_fetch_xor_nbi, atomic_inc,
                   atomic_op, atomic_or, atomic_set, atomic_swap, atomic_swap_nbi,
                   atomic_xor)
from ._init import (MAJOR_VERSION, MINOR_VERSION, THREAD, THREAD_FUNNELED, THREAD_MULTIPLE,
                    THREAD_SERIALIZED, THREAD_SINGLE, VENDOR_STRING, finalize, global_exit,
                    info_get_name, info_get_version, init, init_thread, pcontrol,
                    query_thread)
from ._locks import Lock, clear_lock, del_lock, new_lock, set_lock, test_lock
from ._memory import (MALLOC, MALLOC_ATOMICS_REMOTE, MALLOC_SIGNAL_REMOTE, addr_accessible,
                      alloc, array, del_array, empty, free, fromalloc, full, my_pe, n_pes,
                      new_array, ones, pe_accessible, ptr, zeros)
from ._rma import (SIGNAL, SIGNAL_ADD, SIGNAL_SET, del_signal, g, get, get_nbi, iget, iput,
                   new_signal, p, put, put_nbi, put_signal, put_signal_nbi, signal_fetch)
from ._state import EXTENSION
from ._sync import (CMP, CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE, barrier_all, fence,
                    quiet, signal_wait_until, sync, sync_all, test, test_all,
                    test_all_vector, test_any, test_any_vector, test_some, test_some_vector,
                    wait_until, wait_until_all, wait_until_all_vector, wait_until_any,
                    wait_until_any_vector, wait_until_some, wait_until_some_vector)
from ._team import (CTX, CTX_DEFAULT, CTX_INVALID, CTX_NOSTORE, CTX_PRIVATE, CTX_SERIALIZED,
                    OP, OP_AND, OP_MAX, OP_MIN, OP_OR, OP_PROD, OP_SUM, OP_XOR, TEAM_INVALID,
                    TEAM_SHARED, TEAM_WORLD, Ctx, Team, alltoall, alltoalls, and_reduce,
                    broadcast, collect, ctx_create, ctx_destroy, ctx_get_team, fcollect,
                    max_reduce, min_reduce, or_reduce, prod_reduce, reduce, sum_reduce,
                    team_destroy, team_get_config, team_my_pe, team_n_pes, team_split_2d,
                    team_split_strided, team_sync, team_translate_pe, xor_reduce)

__version__ = "0.1.0"

__all__ = sorted(n for n in dir() if not n.startswith("_") and n != "EXTENSION")
