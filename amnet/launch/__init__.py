"""amnet.launch: ``amnet-run``, the per-node agents, the bootstrap service and the spawners.

It imports no runtime layer except the bootstrap protocol shared with :mod:`amnet.core`
(the agent forks rank processes that run :mod:`amnet.core._procmain`).
"""
