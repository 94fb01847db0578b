"""What the launcher checks of a Slurm allocation before it asks ``srun`` for nodes."""

from __future__ import annotations

import os

from .._errors import ConfigError


def check_allocation(nodes: int, how: str) -> None:
    """Inside a Slurm allocation (``SLURM_JOB_ID``), refuse a job that needs more nodes than
    the allocation has (``SLURM_JOB_NUM_NODES``): ``srun`` would otherwise ask Slurm for them
    and wait in its queue for nodes the allocation can never get. Outside an allocation
    ``srun`` makes one, and waiting for free nodes there is Slurm's ordinary way.

    ``how``: what starts the job with ``srun`` (for the message).

    Raises:
        ConfigError: the allocation is too small, saying both numbers and both ways out.
    """
    job = os.environ.get("SLURM_JOB_ID")
    have = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES")
    if not job or not have or not have.isdigit() or nodes <= int(have):
        return
    raise ConfigError(
        f"the job needs {nodes} nodes and Slurm allocation {job} has {have} "
        f"(SLURM_JOB_NUM_NODES); {how} would wait in Slurm's queue for nodes it cannot get: "
        f"ask salloc/sbatch for {nodes} nodes (-N {nodes}), or run the job on {have} "
        f"(--nodes {have})")
