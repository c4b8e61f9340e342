"""SIGKILL at Delta's commit points, and racing writers of one slot (real processes).

A crash trial runs the executor (tests/reliability's crash writer: three daily partitions,
version "old" then "new") and kills it at one commit point (see ``delta_child``). After the kill
each partition holds exactly its old or its new version (rows and fingerprint), the ledger
claims success only for partitions that hold the new one, the commit records (in the Delta
log's commitInfo) exist exactly for the partitions that hold the new version, and a rerun
converges to a clean run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from datetime import date
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

from twice.destinations import open_destination
from twice.destinations.delta import DeltaDestination
from twice.destinations.fingerprint import fingerprint

CHILD = Path(__file__).with_name("delta_child.py")
POINTS = ("before-commit", "files-written", "after-commit", "before-ledger-commit",
          "after-ledger-commit")


class DeltaTarget(Target):
    def fresh(self) -> tuple[str, str]:
        name = f"t_{uuid.uuid4().hex[:10]}"
        folder = self.tmp / name
        folder.mkdir()
        return (f"delta://{folder}/table?partition_column=day",
                f"sqlite:///{folder / 'ledger.db'}")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> DeltaTarget:
    made = DeltaTarget("delta", tmp_path_factory.mktemp("delta-crash"), None)
    made.reference()
    return made


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_a_commit_point(target: DeltaTarget, point: str) -> None:
    spec, ledger = target.fresh()
    assert cw.run(spec, ledger, "old").ok
    child = trials.child(CHILD, "crash", spec, ledger, point)
    try:
        said = "at:files-written" if point == "files-written" else trials.line(child)
    finally:
        if point != "files-written":
            os.kill(child.pid, signal.SIGKILL)
        code = child.wait(timeout=60)
    assert said == f"at:{point}", child.stderr.read() if child.stderr else ""
    assert code == -signal.SIGKILL
    check_after_kill(target, spec, ledger)
    new = trials.new_days(spec)
    if point == "before-commit":
        assert new == set()  # killed before the first day's commit
    elif point == "files-written":
        assert new <= {cw.day(0)}  # data on disk; the commit may or may not have landed
    else:
        assert new == {cw.day(0)}
    rerun_and_converge(target, spec, ledger, Trial(point))


def test_kill_between_data_files_and_the_log_leaves_the_old_version(tmp_path: Path) -> None:
    """The watcher kills the writer as soon as its data file exists. Until a trial lands in the
    window between the data file and the log commit (the data is on disk, the log does not
    reference it), every trial must show the old version without a record, or the new one
    with its record; the window is then shown to be harmless: readers see the old version,
    and the next write commits normally."""
    day = date(2026, 11, 30)
    outcomes: list[str] = []
    for trial in range(30):
        spec = f"delta://{tmp_path}/t{trial}?partition_column=day"
        root = tmp_path / f"t{trial}"
        with open_destination(spec) as dest:
            dest.replace_partition([{"day": day, "id": 1, "name": "old"}], day, stamp=None)
        child = subprocess.run([sys.executable, str(CHILD), "direct", spec, "20000"],
                               capture_output=True, text=True, timeout=120)
        assert child.returncode in (0, -signal.SIGKILL), child.stderr
        dest = open_destination(spec)
        assert isinstance(dest, DeltaDestination)
        names = {r["name"] for r in dest.read_partition(day).to_pylist()}
        records = dest.commit_records("uow-new")
        if names == {"old"}:
            assert records == [] and dest.versions() == [0]
            assert len(list(root.glob("*.parquet"))) > 1  # the orphan data file is there
            outcomes.append("old")
            dest.replace_partition([{"day": day, "id": 2, "name": "again"}], day, stamp=None)
            assert dest.read_partition(day).to_pylist() == [
                {"day": day, "id": 2, "name": "again"}]
            break
        assert names == {"new"} and len(records) == 1
        assert records[0].row_count == 20000
        assert records[0].checksum == fingerprint(dest, day).checksum
        outcomes.append("new")
    assert outcomes[-1] == "old", outcomes


# --------------------------------------------------------------------------- racing writers


def test_older_token_paused_at_commit_loses_to_a_newer_one(tmp_path: Path) -> None:
    """Token 4 passes the fence on version 0 and pauses before its commit; token 5 commits
    meanwhile. Token 4's commit then conflicts (both carry the slot's app transaction), it
    reloads, sees 5 and is refused."""
    spec = f"delta://{tmp_path}/raced?partition_column=day"
    trials.seed(spec)
    trials.older_paused_at_commit_loses(CHILD, spec, tmp_path / "go")


def test_racing_writers_end_with_the_newest_token(tmp_path: Path) -> None:
    spec = f"delta://{tmp_path}/raced?partition_column=day"
    trials.seed(spec)
    trials.racers_end_with_the_newest(CHILD, spec, _tokens_in_commit_order)


def _tokens_in_commit_order(dest: object) -> list[int]:
    assert isinstance(dest, DeltaDestination)
    return [record.token for _, record in sorted(dest.commit_versions().items())]
