"""Public helpers for tests of pipelines built with twice: a manual clock, a fake BigQuery that
follows BigQuery's documented job-id semantics, and fault helpers.

These are public API: a pipeline's own tests may import them (twice's tests do).
"""

from __future__ import annotations

from twice.testing.clock import ManualClock, no_sleep
from twice.testing.fake_bigquery import FakeBigQuery

__all__ = ["FakeBigQuery", "ManualClock", "no_sleep"]
