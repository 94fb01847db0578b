"""Run the conduit conformance checks of ``tests/test_conduit.py`` against one conduit in this
process and print one JSON line: ``{check id: "ok" or the failure's traceback}``.

``python conduitchild.py NAME``. For conduits whose library must not start in the test
process itself: MPI, once initialized, stays so until the process ends, and the test process
forks the jobs of other tests.
"""

import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import test_conduit as tc  # noqa: E402


def main(name: str) -> None:
    out = {}
    for check in tc.CHECKS:
        a, b = tc.make(name, 0), tc.make(name, 1)
        t0 = time.monotonic()
        try:
            for c in (a, b):
                c.set_peers([a.address, b.address])
            check(a, b)
            out[tc._id(check)] = "ok"
        except BaseException:
            out[tc._id(check)] = traceback.format_exc()
        finally:
            a.close()
            b.close()
        out[tc._id(check) + ":s"] = round(time.monotonic() - t0, 3)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
