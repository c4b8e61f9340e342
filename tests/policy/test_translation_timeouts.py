"""Every tool with a timeout says what it does on one and what twice does instead."""

from __future__ import annotations

import pytest

from twice.core.policy import RetryPolicy
from twice.interop.translations import TO

TWICE_ON_TIMEOUT = (
    "; twice treats a timed-out attempt as outcome unknown and reconciles before retrying"
)


@pytest.mark.parametrize("tool", sorted(set(TO) - {"dagster"}))
def test_a_timeout_adds_one_note_ending_with_twices_treatment(tool: str) -> None:
    with_timeout = TO[tool](RetryPolicy(max_attempts=3, attempt_timeout=60)).differences
    without = TO[tool](RetryPolicy(max_attempts=3)).differences
    notes = [d for d in with_timeout if d.endswith(TWICE_ON_TIMEOUT)]
    assert len(notes) == 1
    assert not notes[0].startswith(TWICE_ON_TIMEOUT)
    assert not [d for d in without if d.endswith(TWICE_ON_TIMEOUT)]
