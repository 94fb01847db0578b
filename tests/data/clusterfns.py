"""The conformance jobs of the other test modules, run on real cluster parts
(tests/test_cluster.py): the core AM job (``amjobs.core``, GASNet's testcore/testam in
spirit), a VIS job (``visjobs.fanout``: every rank to every other at once), upc_rt's whole
suite (``upcjobs.suite``) and every collective (``colljobs.every``). Each rank returns what
the job returned and where it ran: its host name, its network namespace's inode, its node,
the conduit, and the Slurm job and step when Slurm started it.

As a script (``python clusterfns.py JOB OUT OPTIONS``, OPTIONS a JSON object of
``amnet.run``'s keywords: the spawner, the hosts, the topology) it runs the job with
``amnet.run`` and pickles the ranks' results to OUT: the test drives it in a process of its
own, with the environment the job needs (the ssh wrapper on PATH, SLURM_CONF).
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import socket
import sys

import amjobs
import colljobs
import upcjobs
import visjobs

import amnet

VIS_ROUNDS = 3
JOBS = {  # name -> (job, amnet.run options the tests elsewhere give it)
    "core": (amjobs.core, dict(segment_size="2M", max_medium=4096)),
    "vis": (functools.partial(visjobs.fanout, rounds=VIS_ROUNDS),
            dict(segment_size=4 << 20, max_medium=4096, vis_pipeline=2)),
    "upc": (upcjobs.suite, dict(segment_size=4 << 20)),
    "coll": (colljobs.every, {}),
}


def where(ep) -> dict:
    return {"rank": ep.rank, "node": ep.node, "host": socket.gethostname(),
            "netns": os.stat("/proc/self/ns/net").st_ino,
            "conduit": ep.statistics().conduit.name,
            "slurm": (os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID"))}


def located(name: str, ep) -> dict:
    place = where(ep)  # before the job: a job may end in a state where asking is refused
    return {"where": place, "got": JOBS[name][0](ep)}


if __name__ == "__main__":
    import clusterfns  # the ranks find the job by this module's name, not as __main__

    name, out, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    got = amnet.run(functools.partial(clusterfns.located, name), timeout=150,
                    **{**JOBS[name][1], **options})
    with open(out, "wb") as f:
        pickle.dump(got, f)
