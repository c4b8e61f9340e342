"""The deterministic simulation of the real engine (issue 36): invariants over many seeds, the
controls that prove it would catch a rule switched off, and exact replay of a seed."""

from __future__ import annotations

import time

import pytest

from tests.simulation.controls import switched_off
from tests.simulation.faults import CRASH_POINTS
from tests.simulation.harness import DEFAULT_FEATURES, simulate
from tests.simulation.world import FEATURES

#: World features switched off because the engine still has the bug named in world.FEATURES
#: (none since issue 36's fixes: every feature runs in CI).
KNOWN_BUG_FEATURES: frozenset[str] = frozenset()

#: CI size: seeds x steps per seed >= 100,000 simulated steps.
CI_SEEDS, CI_STEPS = 50, 2000
#: Controls: seeds within which a rule switched off must be caught, and steps per seed.
CONTROL_SEEDS, CONTROL_STEPS = 30, 1000

#: Seeds that found a defect, kept as regression tests (2,000 steps each): seed -> the defect.
REGRESSION_SEEDS: dict[int, str] = {
    48: "a restored slot's success ran its remote job again under a new generation",
    1296: "audit appended twice: extract rewritten during audit's attempt",
    1367: "audit appended twice and recorded 2 rows of 3: extract rewritten during the attempt",
    1505: "remote job ran twice for one version: extract rewritten during remote's attempt",
    1519: "remote job ran twice for one version: extract rewritten during remote's attempt",
    1557: "remote job ran twice for one version: extract rewritten during remote's attempt",
    2656: "the model's defect: the second ledger ran before the main ledger had written, so its "
          "first writes claimed the destinations (the product's rule) and were called foreign",
    1552: "the model's defect: notify ran again after an operator's 'failed' and was left "
          "unknown by a crash; the model asked that this later attempt succeeded",
    3943: "the model's defect: as 1552",
    4053: "the model's defect: as 1552, the later attempt failed after it may have acted",
    3721: "an older unit of extract's slot was killed after its write committed; never settled, "
          "the current unit was skipped over its rows and remote refused on every run",
}
REGRESSION_STEPS = 2000
#: A rule whose absence only some seeds show is controlled on named seeds, at
#: REGRESSION_STEPS: those that found its defect, or (operator_resolution: an operator's
#: "failed" for a notify that never delivered is rare) the only seed of 0-99 that shows it, at
#: CONTROL_STEPS (CONTROL_ON_SEEDS_STEPS).
CONTROL_ON_FOUND_SEEDS: dict[str, tuple[int, ...]] = {
    "operator_resolution": (58,),
    # 1557 found it too, but since the second ledger waits for the main one to own every
    # destination (seed 2656) its trajectory changed and it no longer reaches the race: it
    # stays a regression seed
    "input_pinning": (1296, 1367, 1505, 1519),
    "sibling_settlement": (3721,),
}
CONTROL_ON_SEEDS_STEPS: dict[str, int] = {"operator_resolution": CONTROL_STEPS}


def test_features_off_are_exactly_the_known_bugs() -> None:
    """Every feature is either exercised by CI or waits for a named fix."""
    assert DEFAULT_FEATURES | KNOWN_BUG_FEATURES == frozenset(FEATURES)
    assert not DEFAULT_FEATURES & KNOWN_BUG_FEATURES


def test_invariants_hold_over_100k_steps() -> None:
    """At least 100,000 steps over CI_SEEDS seeds: invariants 1-5 after every step, 6 after
    the fault-free phase; every crash point reached, faults fired at most of them."""
    started, total, reached, fired = time.monotonic(), 0, set(), set()
    failures = []
    for seed in range(CI_SEEDS):
        report = simulate(seed, CI_STEPS, DEFAULT_FEATURES)
        total += report.steps_taken
        reached |= set(report.reached)
        fired |= {key.split("/")[0] for key in report.fired}
        if not report.ok:
            failures.append(f"seed {seed}: {report.violations[:3]}\n  replay: {report.replay()}")
    elapsed = time.monotonic() - started
    assert not failures, "\n".join(failures)
    assert total >= 100_000, total
    assert reached == set(CRASH_POINTS), set(CRASH_POINTS) - reached
    assert len(fired) >= len(CRASH_POINTS) - 2, set(CRASH_POINTS) - fired
    print(f"{total} steps in {elapsed:.1f} s ({total / elapsed:.0f} steps/s)")


@pytest.mark.parametrize("rule", ["fencing", "commit_record_precedence",
                                  "acceptance_before_landing", "ledger_identity"])
def test_a_rule_switched_off_is_caught(rule: str) -> None:
    """With one rule switched off, some seed within CONTROL_SEEDS violates an invariant."""
    with switched_off(rule):
        for seed in range(CONTROL_SEEDS):
            if not simulate(seed, CONTROL_STEPS).ok:
                return
    pytest.fail(f"{rule} switched off: no invariant violated in {CONTROL_SEEDS} seeds")


@pytest.mark.parametrize("seed", sorted(REGRESSION_SEEDS))
def test_a_seed_that_found_a_defect_holds(seed: int) -> None:
    report = simulate(seed, REGRESSION_STEPS)
    assert report.ok, f"{REGRESSION_SEEDS[seed]}: {report.violations[:3]}\n{report.replay()}"


@pytest.mark.parametrize("rule", sorted(CONTROL_ON_FOUND_SEEDS))
def test_a_rule_switched_off_is_caught_on_the_seeds_that_found_it(rule: str) -> None:
    """Every seed named for the rule (see CONTROL_ON_FOUND_SEEDS) fails with the rule off."""
    with switched_off(rule):
        steps = CONTROL_ON_SEEDS_STEPS.get(rule, REGRESSION_STEPS)
        held = [seed for seed in CONTROL_ON_FOUND_SEEDS[rule] if simulate(seed, steps).ok]
    assert not held, f"{rule} switched off: seeds {held} still hold"


def test_a_seed_replays_exactly() -> None:
    """The same seed takes the same steps, fires the same faults, ends the same way."""
    first, second = simulate(7, 600), simulate(7, 600)
    assert (first.steps_taken, first.fired, first.reached, first.runs, first.crashes) == (
        second.steps_taken, second.fired, second.reached, second.runs, second.crashes)
    assert first.violations == second.violations
