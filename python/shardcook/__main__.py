"""`python -m shardcook` (what torchrun runs)."""

from shardcook.cli import main

main()
