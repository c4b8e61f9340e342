"""SIGKILL at Iceberg's commit points, and racing writers of one slot (real processes).

A crash trial runs the executor (tests/reliability's crash writer: three daily partitions,
version "old" then "new") and kills it at one commit point (see ``iceberg_child``). After the
kill each partition holds exactly its old or its new version (rows and fingerprint), the ledger
claims success only for partitions that hold the new one, the commit records (the snapshots'
summaries) exist exactly for the partitions that hold the new version, and a rerun converges
to a clean run.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest
from tests.reliability import crash_writer as cw
from tests.reliability import table_format_trials as trials
from tests.reliability.test_reliability_crash import (
    Target,
    Trial,
    check_after_kill,
    rerun_and_converge,
)

CHILD = Path(__file__).with_name("iceberg_child.py")
# One trial per kind of commit point (the data files of "before-commit" are written by the
# time "metadata-written" is reached; "before-ledger-commit" lies between "after-commit" and
# "after-ledger-commit"), to keep the suite to a few seconds per trial.
POINTS = ("after-delete", "metadata-written", "after-commit", "after-ledger-commit")


class IcebergTarget(Target):
    def fresh(self) -> tuple[str, str]:
        name = f"t_{uuid.uuid4().hex[:10]}"
        folder = self.tmp / name
        folder.mkdir()
        return (f"iceberg://{folder}/wh?partition_column=day#ns.{name}",
                f"sqlite:///{folder / 'ledger.db'}")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> IcebergTarget:
    made = IcebergTarget("iceberg", tmp_path_factory.mktemp("iceberg-crash"), None)
    made.reference()
    return made


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_a_commit_point(target: IcebergTarget, point: str) -> None:
    spec, ledger = target.fresh()
    assert cw.run(spec, ledger, "old").ok
    child = trials.child(CHILD, "crash", spec, ledger, point)
    try:
        said = trials.line(child)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        code = child.wait(timeout=30)
    assert said == f"at:{point}", child.stderr.read() if child.stderr else ""
    assert code == -signal.SIGKILL
    check_after_kill(target, spec, ledger)
    new = trials.new_days(spec)  # a commit record exactly where "new" landed
    if point in ("after-delete", "metadata-written"):
        assert new == set()  # killed inside the first day's write, before its catalog commit
    else:
        assert new == {cw.day(0)}
    rerun_and_converge(target, spec, ledger, Trial(point))


# --------------------------------------------------------------------------- racing writers


def _racers_spec(tmp_path: Path) -> str:
    return f"iceberg://{tmp_path}/wh?partition_column=day#ns.raced"


def test_older_token_paused_at_commit_loses_to_a_newer_one(tmp_path: Path) -> None:
    """Token 4 pauses before the catalog commit while token 5 commits: 4 is refused."""
    trials.older_paused_at_commit_loses(CHILD, _racers_spec(tmp_path), tmp_path / "go")


def test_racing_writers_end_with_the_newest_token(tmp_path: Path) -> None:
    spec = _racers_spec(tmp_path)
    trials.seed(spec)
    trials.racers_end_with_the_newest(CHILD, spec, _tokens_in_commit_order)


def _tokens_in_commit_order(dest: object) -> list[int]:
    import json

    from twice.destinations.iceberg import COMMIT_PROPERTY, IcebergDestination, _history

    assert isinstance(dest, IcebergDestination)
    tokens = []
    for snapshot in _history(dest._require()):
        text = snapshot.summary.additional_properties.get(COMMIT_PROPERTY)
        if text is not None:
            token = json.loads(text)["token"]
            if not tokens or tokens[-1] != token:
                tokens.append(token)
    return tokens
