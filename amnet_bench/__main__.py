"""``python -m amnet_bench`` is ``amnet-bench``."""

from ._amnet import reexec_if_shadowed

reexec_if_shadowed()  # a folder 'amnet' in the current directory shadows amnet: again with -P

from .cli import main  # noqa: E402

main()
