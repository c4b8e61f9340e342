"""An injectable fault plan for the funds-positions demo.

Each fault fires once (the first attempt that meets it), like a real transient problem: a
retry or a reconciliation must then cope. The plan is an object handed to ``build_pipeline``;
a clean run simply gets no plan.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import date


class SourceUnavailableError(ConnectionError):
    """Transient: the source share did not answer (listed as transient in the retry policy)."""


@dataclass
class FaultPlan:
    """Which day meets which fault; ``fired`` remembers what already happened."""

    transient_extract: dict[date, int] = field(default_factory=dict)  # day -> failures
    lost_ack_load: set[date] = field(default_factory=set)
    slow_transform: dict[date, float] = field(default_factory=dict)  # day -> seconds
    fired: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def demo(cls) -> FaultPlan:
        """The demo's plan over 2026-11-23..2026-11-29."""
        return cls(
            transient_extract={date(2026, 11, 24): 2, date(2026, 11, 26): 1},
            lost_ack_load={date(2026, 11, 25)},
            slow_transform={date(2026, 11, 27): 0.4},
        )

    def _take(self, key: str, limit: int = 1) -> bool:
        with self._lock:
            if self.fired.count(key) >= limit:
                return False
            self.fired.append(key)
            return True

    def on_extract(self, day: date) -> None:
        """Raise a transient error the first N times ``day`` is extracted."""
        failures = self.transient_extract.get(day, 0)
        if failures and self._take(f"extract:{day}", failures):
            raise SourceUnavailableError(f"source share timed out reading {day} (injected)")

    def lose_load_ack(self, day: date) -> bool:
        """Whether the load of ``day`` should 'lose' its acknowledgement after writing."""
        return day in self.lost_ack_load and self._take(f"lost-ack:{day}")

    def on_transform(self, day: date) -> float:
        """Sleep for the configured slow-down of ``day``; returns the seconds slept."""
        seconds = self.slow_transform.get(day, 0.0)
        if seconds and self._take(f"slow:{day}"):
            time.sleep(seconds)
            return seconds
        return 0.0
