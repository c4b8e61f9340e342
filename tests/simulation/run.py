"""Run the deterministic simulation from the command line; a failing seed prints the one line
that replays it.

    python -m tests.simulation.run --seed 1234 --steps 2000
    python -m tests.simulation.run --seeds 0-49 --steps 2000
    python -m tests.simulation.run --long            # 10,000,000 steps (5,000 seeds x 2,000)
    python -m tests.simulation.run --long --journal long.txt    # resumable, see below

A journal makes a long run resumable across processes and machines' restarts: each finished
seed appends one line, seeds already in it are skipped, and the totals are the journal's. It
names the engine it ran (a hash of twice's source files): a journal is one engine revision, and
resuming it on another is refused.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from pathlib import Path

from tests.simulation.harness import DEFAULT_FEATURES, simulate
from tests.simulation.world import FEATURES

LONG_SEEDS = 5000
_JOURNAL_SEED = re.compile(r"^seed (\d+) steps (\d+) (ok|FAILED)$")


def engine_hash() -> str:
    """The engine revision a simulation runs: a hash of twice's source files (not git's: a
    snapshot copied out of the repository has no history)."""
    import twice

    root = Path(twice.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def read_journal(path: Path, header: str) -> dict[int, tuple[int, bool]]:
    """Seeds already run in ``path``: seed -> (steps, ok). Refuses a journal whose header (the
    engine and the run's settings) is not ``header``."""
    done: dict[int, tuple[int, bool]] = {}
    if not path.exists():
        path.write_text(header + "\n")
        return done
    lines = path.read_text().splitlines()
    if not lines or lines[0] != header:
        raise SystemExit(f"{path}: a journal of another engine or settings "
                         f"({lines[0] if lines else 'empty'}; this run is {header}): "
                         "start a new journal")
    for line in lines[1:]:
        match = _JOURNAL_SEED.match(line)
        if match:
            done[int(match[1])] = (int(match[2]), match[3] == "ok")
    return done


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
    parser.add_argument("--journal", type=Path, default=None,
                        help="resumable: skip seeds already in this file, append each new one")
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
    header = (f"engine {engine_hash()} steps {args.steps} features "
              f"{','.join(sorted(features)) or '-'} fault-rate {args.fault_rate} "
              f"rule-off {args.rule_off or '-'}")
    journal = read_journal(args.journal, header) if args.journal else {}
    seeds = [seed for seed in seeds if seed not in journal]
    started, total, failed = time.monotonic(), 0, 0
    control.__enter__()
    for seed in seeds:
        report = simulate(seed, args.steps, features, args.fault_rate)
        total += report.steps_taken
        if args.journal:
            with args.journal.open("a") as out:
                out.write(f"seed {seed} steps {report.steps_taken} "
                          f"{'ok' if report.ok else 'FAILED'}\n")
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
          f"({total / max(elapsed, 1e-9):.0f} steps/s), {failed} failed")
    if args.journal:
        everything = read_journal(args.journal, header)
        failed_before = sorted(s for s, (_, ok) in everything.items() if not ok)
        print(f"journal {args.journal} ({header}): {len(everything)} seeds, "
              f"{sum(n for n, _ in everything.values())} steps, {len(failed_before)} failed"
              + (f" (seeds {failed_before[:10]})" if failed_before else ""))
        failed += len(failed_before)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
