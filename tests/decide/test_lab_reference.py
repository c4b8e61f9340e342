"""Byte-for-byte compatibility with the lab's reference program on generated inputs.

In-process: the reference's ``evaluate`` against ``twice.interop.lab.evaluate`` on thousands of
valid, boundary and malformed payloads (same output line, or both invalid). In a subprocess: the
real commands (``twice decide`` and ``labs/pde-retry-window/run.py``) against the reference
program on stdin, comparing stdout bytes and exit codes, including non-JSON, oversized and
deeply nested input.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.decide.conftest import reference_source, seed_source
from tests.decide.lab_cases import CASE_PATH, lab_case, mutated_fixtures, raw_texts, valid_fixtures
from twice.interop.lab import FixtureError, evaluate

ROOT = Path(__file__).resolve().parents[2]
RUN_PY = ROOT / "labs" / "pde-retry-window" / "run.py"


def test_the_copied_reference_is_the_seed_program() -> None:
    """The oracle beside the tests is the seed's program, byte for byte, wherever the seed text
    is found (it always is beside /work/main); a clone elsewhere runs on the copy."""
    seed = seed_source()
    if seed is None:
        pytest.skip("no seed text beside this checkout: the copy is the oracle")
    assert reference_source() == seed


def reference_line(reference: types.ModuleType, raw: str) -> str | None:
    """The reference's stdout line for ``raw``, or None where it exits 2."""
    try:
        if len(raw) > 1_000_000:
            return None
        return json.dumps(reference.evaluate(json.loads(raw)), sort_keys=True)
    except (ValueError, TypeError, RecursionError):
        return None


def twice_line(raw: str) -> str | None:
    try:
        return evaluate(raw)
    except FixtureError:
        return None


settings_in_process = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@settings_in_process
@given(valid_fixtures())
def test_valid_fixtures_match_reference(reference: types.ModuleType, fixture: dict) -> None:
    raw = json.dumps(fixture)
    expected = reference_line(reference, raw)
    assert expected is not None
    assert twice_line(raw) == expected


@settings_in_process
@given(mutated_fixtures().flatmap(raw_texts))
def test_malformed_fixtures_match_reference(reference: types.ModuleType, raw: str) -> None:
    assert twice_line(raw) == reference_line(reference, raw)


def run(command: list[str], raw: bytes) -> tuple[bytes, int, bytes]:
    done = subprocess.run(command, input=raw, capture_output=True, timeout=60)
    return done.stdout, done.returncode, done.stderr


def twice_commands() -> list[list[str]]:
    return [
        [sys.executable, "-c", "from twice.cli import main; main()", "decide"],
        [sys.executable, str(RUN_PY)],
        # through Click (an explicit option), a deeper stack than the fast path
        [sys.executable, "-m", "twice.cli", "decide", "--format", "json"],
    ]


def corpus() -> list[bytes]:
    case = lab_case()
    text = json.dumps(case)
    deep = "[" * 990 + "]" * 990
    deeper = "[" * 5000 + "]" * 5000
    big_ok = text[:-1] + "," + " " * (1_000_000 - len(text) - 1) + "}"
    return [
        text.encode(),
        b"",
        b"not json",
        b"\xff\xfe{}",
        ("\ufeff" + text).encode(),
        f'{{"asOf": {deep}, {text[1:]}'.encode(),
        f'{{"asOf": {"[" * 998}{"]" * 998}, {text[1:]}'.encode(),
        f'{{"asOf": {deeper}, {text[1:]}'.encode(),
        deeper.encode(),
        big_ok.encode(),
        (big_ok[:-1] + " }").encode(),
        ("[" * 1_000_001).encode(),
        text.replace('"asOf": 100', '"asOf": 100.0').encode(),
        text.replace('"safeRepeat": true', '"safeRepeat": 1', 1).encode(),
        text.replace('"attempts": 2', '"attempts": true', 1).encode(),
        text.replace('"observedAt": 98', '"observedAt": 101', 1).encode(),
        text.replace("\n", "\r\n").encode(),
        json.dumps(dict(case, tasks=[])).encode(),
        json.dumps(
            dict(case, tasks=[dict(case["tasks"][0], id=f"t{i}") for i in range(21)])
        ).encode(),
        json.dumps(dict(case, tasks=case["tasks"] + [case["tasks"][0]])).encode(),
        json.dumps(dict(case, extra=1)).encode(),
        ('{"asOf": 1' + "0" * 5000 + "}").encode(),
    ]


@pytest.mark.parametrize("command", twice_commands(), ids=["twice-decide", "run.py", "click-path"])
def test_commands_match_reference_on_stdin(reference_file: Path, command: list[str]) -> None:
    for raw in corpus():
        out, code, _ = run([sys.executable, str(reference_file)], raw)
        ours, our_code, our_err = run(command, raw)
        assert (ours, our_code) == (out, code), raw[:120]
        if code == 2:
            assert our_err.decode(errors="replace").startswith("Invalid retry fixture")
            assert b"Traceback" not in our_err


@settings(max_examples=40, deadline=None)
@given(st.one_of(mutated_fixtures(), valid_fixtures()).flatmap(lambda f: raw_texts(f, deep=True)))
def test_cli_matches_reference_on_generated_stdin(reference_file: Path, raw: str) -> None:
    data = raw.encode("utf-8", errors="surrogatepass")
    expected = run([sys.executable, str(reference_file)], data)[:2]
    assert run(twice_commands()[0], data)[:2] == expected


def test_shipped_case_is_the_lab_fixture(reference_file: Path) -> None:
    out, code, _ = run([sys.executable, str(reference_file)], CASE_PATH.read_bytes())
    assert code == 0
    assert run(twice_commands()[0], CASE_PATH.read_bytes())[:2] == (out, 0)
