"""``python -m twice.cli``: the same command line as the ``twice`` script."""

from twice.cli import main

main()
