"""``python -m amnet app.py``: one process of an amnet job started by an MPI launcher
(``mpiexec -n 8 python -m amnet app.py``); see :mod:`amnet.launch.mpiproc`."""

import sys

from amnet._safepath import reexec_if_shadowed

reexec_if_shadowed()  # a folder 'amnet' in the current directory shadows amnet: again with -P

from amnet.launch.mpiproc import main  # noqa: E402

sys.exit(main())
