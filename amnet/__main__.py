"""``python -m amnet app.py``: one process of an amnet job started by an MPI launcher
(``mpiexec -n 8 python -m amnet app.py``); see :mod:`amnet.launch.mpiproc`."""

import sys

from amnet.launch.mpiproc import main

sys.exit(main())
