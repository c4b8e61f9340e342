"""Decision-engine benchmark: 100,000 tasks, and the lab command's start-up.

Prints side-by-side figures measured in the same run: the engine's time per task, the full
extended command path (parse + validate + decide + render) against ``json.loads`` + ``json.dumps``
of the same payload (the floor any JSON tool pays), and ``twice decide`` start-up against
``python3 -c pass`` and against the lab program shape (a bare script). No assertions: read the
ratios.

    python bench/bench_decide.py [--tasks 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from twice.core.decision import decide
from twice.interop.extended import decide_extended, parse_extended, render_extended

ROOT = Path(__file__).resolve().parents[1]
CASE = json.loads((ROOT / "labs" / "pde-retry-window" / "case.json").read_text())


def payload(tasks: int) -> str:
    fixture = dict(CASE)
    base = CASE["tasks"]
    fixture["tasks"] = [dict(base[i % len(base)], id=f"task-{i:07d}") for i in range(tasks)]
    return json.dumps(fixture)


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def startup(command: list[str], stdin: bytes, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, input=stdin, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    raw = payload(args.tasks)
    window, tasks, _clock = parse_extended(json.loads(raw))
    engine = best(lambda: decide(window, tasks), args.repeat)
    full = best(lambda: json.dumps(render_extended(*decide_extended(raw))), args.repeat)
    floor = best(lambda: json.dumps(json.loads(raw)), args.repeat)

    case = (ROOT / "labs" / "pde-retry-window" / "case.json").read_bytes()
    bare = startup([sys.executable, "-c", "pass"], b"", args.repeat * 2)
    lab_shape = startup(
        [sys.executable, "-c", "import json, re, sys; json.loads(sys.stdin.read())"],
        case,
        args.repeat * 2,
    )
    twice_cli = startup([sys.executable, "-m", "twice.cli", "decide"], case, args.repeat * 2)
    wrapper = startup(
        [sys.executable, str(ROOT / "labs" / "pde-retry-window" / "run.py")], case, args.repeat * 2
    )

    rows = [
        (
            "decide() engine only",
            f"{engine * 1000:.1f} ms",
            f"{engine / args.tasks * 1e6:.2f} us/task",
            "-",
        ),
        (
            "extended: parse+decide+render",
            f"{full * 1000:.1f} ms",
            f"{full / args.tasks * 1e6:.2f} us/task",
            f"{full / floor:.1f}x json round-trip",
        ),
        ("json.loads+json.dumps (floor)", f"{floor * 1000:.1f} ms", "-", "1.0x"),
        ("python3 -c pass", f"{bare * 1000:.1f} ms", "-", "1.0x"),
        ("bare lab-shaped script", f"{lab_shape * 1000:.1f} ms", "-", f"{lab_shape / bare:.2f}x"),
        ("twice decide (lab mode)", f"{twice_cli * 1000:.1f} ms", "-", f"{twice_cli / bare:.2f}x"),
        ("labs/.../run.py", f"{wrapper * 1000:.1f} ms", "-", f"{wrapper / bare:.2f}x"),
    ]
    print(f"decision engine benchmark: {args.tasks} tasks, best of {args.repeat}")
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'time':>10}  {'per task':>14}  ratio")
    for name, t, per, ratio in rows:
        print(f"{name:<{width}}  {t:>10}  {per:>14}  {ratio}")


if __name__ == "__main__":
    main()
