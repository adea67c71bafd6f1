"""``python -m atfgraph.cli``: the same command as ``atfg``."""

from . import main

main()
