"""Run the deterministic simulation from the command line; a failing seed prints the one line
that replays it.

    python -m tests.simulation.run --seed 1234 --steps 2000
    python -m tests.simulation.run --seeds 0-49 --steps 2000
    python -m tests.simulation.run --long            # 10,000,000 steps (5,000 seeds x 2,000)
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.simulation.harness import DEFAULT_FEATURES, simulate
from tests.simulation.world import FEATURES

LONG_SEEDS = 5000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation.run")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--seeds", default="0-9", help="a range FIRST-LAST (inclusive)")
    parser.add_argument("--steps", type=int, default=2000, help="steps per seed")
    parser.add_argument("--long", action="store_true", help=f"{LONG_SEEDS} seeds")
    parser.add_argument("--features", default=None,
                        help=f"comma-separated, 'all' or 'none'; known: {', '.join(FEATURES)}")
    parser.add_argument("--fault-rate", type=float, default=0.02)
    parser.add_argument("--rule-off", default=None, help="switch a rule off (controls.RULES)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.features is None:
        features = DEFAULT_FEATURES
    elif args.features == "all":
        features = frozenset(FEATURES)
    elif args.features == "none":
        features = frozenset()
    else:
        features = frozenset(f for f in args.features.split(",") if f)
    if args.seed is not None:
        seeds = [args.seed]
    elif args.long:
        seeds = list(range(LONG_SEEDS))
    else:
        first, _, last = args.seeds.partition("-")
        seeds = list(range(int(first), int(last or first) + 1))
    from contextlib import nullcontext

    from tests.simulation.controls import switched_off

    control = switched_off(args.rule_off) if args.rule_off else nullcontext()
    started, total, failed = time.monotonic(), 0, 0
    control.__enter__()
    for seed in seeds:
        report = simulate(seed, args.steps, features, args.fault_rate)
        total += report.steps_taken
        if args.verbose:
            print(f"seed {seed}: {report.steps_taken} steps, {report.runs} runs, "
                  f"{report.crashes} crashes, fired {sum(report.fired.values())}, "
                  f"operator {report.operator_actions}, escaped {len(report.escaped)}")
            for line in report.escaped[:5]:
                print("   escaped:", line)
        if not report.ok:
            failed += 1
            print(f"seed {seed} FAILED at step {report.failed_at_step}:")
            for violation in report.violations[:5]:
                print(f"  invariant {violation}")
            extra = f" --rule-off {args.rule_off}" if args.rule_off else ""
            print(f"  replay: {report.replay()}{extra}")
    control.__exit__(None, None, None)
    elapsed = time.monotonic() - started
    print(f"{len(seeds)} seeds, {total} steps in {elapsed:.1f} s "
          f"({total / elapsed:.0f} steps/s), {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
