"""Fixtures for the report tests: one story ledger per session (the tests only read it)."""

from __future__ import annotations

import pytest
from tests.reports.story import AS_OF, StoryLedger, write_story

from twice.reports import Evidence, load_evidence


@pytest.fixture(scope="session")
def story(tmp_path_factory: pytest.TempPathFactory) -> StoryLedger:
    return write_story(tmp_path_factory.mktemp("story") / "ledger.db")


@pytest.fixture(scope="session")
def evidence(story: StoryLedger) -> Evidence:
    return load_evidence(story.url, as_of=AS_OF)
