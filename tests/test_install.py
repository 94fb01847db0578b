"""The README's install seen from a user's folder: a clone named ``amnet`` beside the user's
scripts (``git clone ... amnet`` in ``work/``, then ``work/heat.py``) must not hide the
installed package. The clone's root has no ``__init__.py``, so from ``work/`` it is a
namespace portion named ``amnet``; an editable install made of an import hook lost to it
(``AttributeError: module 'amnet' has no attribute 'Extension'``), while a path entry on
sys.path (what the README's ``pip install -e .`` makes: pyproject.toml) finds the real
package further along, which beats a namespace portion."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import amnet
import shmem_rt as shmem
me = shmem.my_pe()
shmem.barrier_all()
print("heat", me, shmem.n_pes(), amnet.Extension.__name__, flush=True)
"""


def _clone_beside(tmp_path):
    clone = tmp_path / "amnet"  # the clone's root: a README and the package folder below it
    (clone / "amnet").mkdir(parents=True)
    (clone / "README.md").write_text("# amnet\n")
    (clone / "amnet" / "__init__.py").write_text("raise ImportError('the wrong copy')\n")
    (tmp_path / "heat.py").write_text(SCRIPT)


def test_python_c_from_a_folder_with_a_clone_named_amnet(tmp_path):
    _clone_beside(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", "import amnet, shmem_rt, upc_rt; "
                          "print(amnet.Extension.__name__, amnet.__file__)"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    name, path = out.stdout.split()
    assert name == "Extension" and not path.startswith(str(tmp_path)), out.stdout


def test_a_script_beside_a_clone_named_amnet_runs_under_amnet_run(runner):
    _clone_beside(runner.tmp)
    # python heat.py: the script's folder is first on sys.path
    env = {k: v for k, v in runner.env().items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "heat.py"], cwd=runner.tmp, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["heat", "0", "1", "Extension"]
    # amnet-run from that folder (python -m puts it first on the launcher's sys.path too)
    out = runner("-n", "2", "--nodes", "2", "heat.py", timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == ["heat 0 2 Extension", "heat 1 2 Extension"]
