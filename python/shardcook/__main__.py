"""`python -m shardcook` (what torchrun runs). Importing this module runs nothing.

Python puts the current folder first on the module path for `-m`; it is taken off here, before the
commands import anything more, so that a dataset folder one works in cannot stand in for a library
shardcook or Energon imports later (`torch.py`, `megatron/...`)."""

import os
import sys

if __name__ == "__main__":
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]

    from shardcook.cli import main

    main()
