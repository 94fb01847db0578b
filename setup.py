"""Builds the C extensions (the shared-memory network's primitives, the AM hot path, the
collectives' data handler and node-area flags); the
metadata is in pyproject.toml."""

from setuptools import Extension, setup

# amnet/_c/pyext.h: what the extensions share (header-only: the types' shape, discard), so
# every extension that includes it depends on it
setup(
    ext_modules=[
        Extension("amnet.pshm._native", ["amnet/pshm/_native.c"], extra_compile_args=["-O2"],
                  depends=["amnet/pshm/_atomic_table.h", "amnet/pshm/_queue.h"]),
        # one extension from several files: the module, then one file per concern (the
        # design notes and which file holds what: amnet/core/_hot.h)
        Extension("amnet.core._hot",
                  ["amnet/core/_hot.c", "amnet/core/_hot_lock.c", "amnet/core/_hot_queue.c",
                   "amnet/core/_hot_progress.c", "amnet/core/_hot_engine.c",
                   "amnet/core/_hot_token.c", "amnet/core/_hot_ep.c"],
                  extra_compile_args=["-O2"],
                  depends=["amnet/core/_hot.h", "amnet/_c/pyext.h", "amnet/pshm/_atomic_table.h",
                           "amnet/pshm/_queue.h"]),
        # the mpi conduit's envelopes (amnet/conduits/_mpi.py): MPI called through the
        # library mpi4py loaded (dlopen), so nothing about MPI is needed to build it
        Extension("amnet.conduits._mpiring",
                  ["amnet/conduits/_mpiring.c", "amnet/conduits/_mpiring_mpi.c"],
                  extra_compile_args=["-O2"], libraries=["dl"],
                  depends=["amnet/conduits/_mpiring.h", "amnet/_c/pyext.h"]),
        # the collectives' data handler's common case (amnet/coll/_msg.py, Mailbox.on_data)
        # and the small calls' bookkeeping (amnet/coll/_fast.py)
        Extension("amnet.coll._cmail", ["amnet/coll/_cmail.c", "amnet/coll/_cmail_core.c"],
                  extra_compile_args=["-O2"], depends=["amnet/coll/_cmail.h", "amnet/_c/pyext.h"]),
        # the flags of a team's node area (amnet/coll/_shm.py)
        Extension("amnet.coll._shm", ["amnet/coll/_shm.c"], extra_compile_args=["-O2"],
                  depends=["amnet/_c/pyext.h"]),
    ],
)
