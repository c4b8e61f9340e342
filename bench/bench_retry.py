"""Retry-wrapper overhead: a bare call against ``twice.retry`` and ``tenacity``.

    python bench/bench_retry.py [--calls 200000] [--repeat 5]

Times, in the same run, a function that returns its argument:

* called bare (the floor);
* through ``@twice.retry(policy)`` and ``twice.retry(policy).call(fn, x)`` (success on the
  first try: the fast path), and through the decorator with a deadline (reads the clock);
* through ``@tenacity.retry`` configured the same way (3 attempts, exponential backoff with
  jitter, retry only on ``ConnectionError``);
* one transient failure then success, sleeping disabled in both libraries, so what is timed is
  the retry machinery itself.

Per-call times are the best of ``--repeat`` runs of ``--calls`` calls (tenacity and the failure
cases run 20x fewer calls, as they are much slower). Nothing is asserted: read the ratios.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from typing import Any

import tenacity

import twice
from twice.core.policy import RetryPolicy

POLICY = RetryPolicy(max_attempts=3, initial_delay=1.0, multiplier=2.0, max_delay=60.0,
                     jitter="full", transient=(ConnectionError,))


def identity(x: int) -> int:
    return x


def no_sleep(_seconds: float) -> None:
    """Sleeping disabled: the failure cases time the machinery, not the backoff."""


class FlakyOnce:
    """Raises ConnectionError on every other call: one transient failure, then success."""

    def __init__(self) -> None:
        self.fail = True

    def __call__(self, x: int) -> int:
        self.fail = not self.fail
        if not self.fail:
            raise ConnectionError("transient")
        return x


def tenacity_retry(fn: Callable[..., Any]) -> Callable[..., Any]:
    return tenacity.retry(
        stop=tenacity.stop_after_attempt(POLICY.max_attempts),
        wait=tenacity.wait_exponential_jitter(initial=POLICY.initial_delay,
                                              max=POLICY.max_delay),
        retry=tenacity.retry_if_exception_type(POLICY.transient),
        reraise=True,
        sleep=no_sleep,
    )(fn)


def per_call(statement: str, namespace: dict[str, Any], calls: int, repeat: int) -> float:
    times = timeit.repeat(statement, number=calls, repeat=repeat, globals=namespace)
    return min(times) / calls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    if args.calls < 20 or args.repeat < 1:
        parser.error("--calls must be >= 20 and --repeat >= 1")
    few = args.calls // 20

    retrying = twice.retry(POLICY)
    ns: dict[str, Any] = {
        "bare": identity,
        "twice_deco": twice.retry(POLICY)(identity),
        "retrying": retrying,
        "identity": identity,
        "twice_deadline": twice.retry(POLICY, deadline=3600.0, attempt_duration=1.0)(identity),
        "tenacity_deco": tenacity_retry(identity),
        "twice_flaky": twice.retry(POLICY, sleep=no_sleep)(FlakyOnce()),
        "tenacity_flaky": tenacity_retry(FlakyOnce()),
    }
    rows: list[tuple[str, float]] = [
        ("bare call", per_call("bare(1)", ns, args.calls, args.repeat)),
        ("@twice.retry", per_call("twice_deco(1)", ns, args.calls, args.repeat)),
        ("twice.retry(...).call", per_call("retrying.call(identity, 1)", ns, args.calls,
                                           args.repeat)),
        ("@twice.retry with deadline", per_call("twice_deadline(1)", ns, args.calls,
                                                args.repeat)),
        ("@tenacity.retry", per_call("tenacity_deco(1)", ns, few, args.repeat)),
    ]
    flaky = [
        ("twice.retry, 1 failure + success", per_call("twice_flaky(1)", ns, few, args.repeat)),
        ("tenacity, 1 failure + success", per_call("tenacity_flaky(1)", ns, few, args.repeat)),
    ]
    bare = rows[0][1]
    tenacity_ok = rows[-1][1]
    width = max(len(name) for name, _ in rows + flaky)
    print(f"retry wrapper overhead: {args.calls:,} calls (tenacity and failures {few:,}), "
          f"best of {args.repeat}")
    print(f"{'successful call':<{width}}  {'ns/call':>10}  {'overhead ns':>11}  "
          f"{'x bare':>8}  {'x tenacity':>10}")
    for name, value in rows:
        print(f"{name:<{width}}  {value * 1e9:>10.0f}  {(value - bare) * 1e9:>11.0f}  "
              f"{value / bare:>8.1f}  {value / tenacity_ok:>10.4f}")
    print(f"\n{'retried call (no sleep)':<{width}}  {'ns/call':>10}  {'x tenacity':>10}")
    tenacity_flaky = flaky[1][1]
    for name, value in flaky:
        print(f"{name:<{width}}  {value * 1e9:>10.0f}  {value / tenacity_flaky:>10.3f}")
    overhead_twice = rows[1][1] - bare
    overhead_tenacity = tenacity_ok - bare
    if overhead_twice > 0:
        print(f"\noverhead on success: tenacity / twice.retry = "
              f"{overhead_tenacity / overhead_twice:.0f}x")


if __name__ == "__main__":
    main()
