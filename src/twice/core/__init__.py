"""The pure core: intervals, units of work, retry policy and backoff, the lab planner, the one
outcome vocabulary, time scales and destination schemes.

Standard library only, no clock and no I/O: "now" is always an input. It imports nothing of
twice but itself and the error root (``twice.errors``); see docs/architecture.md.
"""
