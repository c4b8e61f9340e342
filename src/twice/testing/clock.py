"""A clock that moves only when told, so backoff waits, polls and deadlines are exact in tests."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta


class ManualClock:
    """Time that moves only when slept on or advanced.

    Share one with the ledger (``Ledger.open(url, clock=clock)``), the executor (``clock=clock,
    sleep=clock.sleep``) and a fake service, so every record agrees on "now". ``sleeps`` lists
    every wait the code under test asked for.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock start must be timezone-aware")
        self._now = start
        self._lock = threading.Lock()
        self.sleeps: list[float] = []

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)


def no_sleep(_seconds: float) -> None:
    """An injected sleep that returns at once (the ledger still records the planned wait)."""
