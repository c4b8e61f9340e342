"""``python -m twice``: the same command line as the ``twice`` script."""

from twice.cli import main

main()
