"""Thin wrapper: ``python3 run.py < case.json`` behaves exactly like the lab's program.

All the logic is in ``twice.interop.lab``; this file only makes it runnable from the lab folder
(with or without ``twice`` installed).
"""

import sys
from pathlib import Path

try:
    from twice.interop.lab import main
except ImportError:  # not installed: use the checkout's sources
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from twice.interop.lab import main

if __name__ == "__main__":
    sys.exit(main())
