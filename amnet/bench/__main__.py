"""``python -m amnet.bench`` is ``amnet-bench``."""

from .cli import main

main()
