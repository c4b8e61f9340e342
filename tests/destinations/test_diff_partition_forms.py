"""``twice diff`` on tables a real ``twice run`` wrote: every partition form other commands
accept, and versions that are exactly the ones it lists.

Found by issue 39: on a SQL destination with ``keep_previous`` written by ``twice run``,
``--partition 2026-11-30`` said "no such version" (the run keeps the day's slice as an interval,
``day in [2026-11-30, 2026-12-01)``, and the value ``day=2026-11-30`` was another slice) and
``--partition 2026-11-30/2026-12-01`` said "interval start must be timezone-aware" (only a
full ISO interval with offsets was taken); on Iceberg the help's ``--from 1 --to 2`` needed
19-digit snapshot ids. Real engines (SQLite, DuckDB, Iceberg, Delta), the real CLI.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from twice.cli import cli

PIPELINE = '''
import pyarrow as pa
from pathlib import Path

from twice.core.policy import RetryPolicy
from twice.define.pipeline import Pipeline, TaskContext
from twice.define.schedule import Schedule

SCHEMA = pa.schema([("day", pa.date32()), ("id", pa.int64()), ("v", pa.int64())])
pipeline = Pipeline("forms", schedule=Schedule.daily("UTC"))


@pipeline.task(destination={spec!r}, write="replace", safe_repeat=True, timeout=60,
               retry=RetryPolicy(max_attempts=1))
def load(ctx: TaskContext) -> pa.Table:
    day = ctx.interval.start.date()
    if (Path(__file__).parent / "v2").exists():  # 0 removed, 1 changed, 7 added
        rows = [{{"day": day, "id": 1, "v": 100}}, {{"day": day, "id": 2, "v": 2}},
                {{"day": day, "id": 3, "v": 3}}, {{"day": day, "id": 7, "v": 7}}]
    else:
        rows = [{{"day": day, "id": i, "v": i}} for i in range(4)]
    return pa.Table.from_pylist(rows, schema=SCHEMA)
'''

SPECS = {
    "sqlite": "sqlite://{tmp}/w.db?partition_column=day&key_columns=id&keep_previous=7#t",
    "duckdb": "duckdb://{tmp}/w.duckdb?partition_column=day&key_columns=id&keep_previous=7#t",
    "iceberg": "iceberg://{tmp}/wh?partition_column=day&key_columns=id#ns.t",
    "delta": "delta://{tmp}/t?partition_column=day&key_columns=id",
}
EXPECTED = {"added": 1, "removed": 1, "changed": 1, "unchanged": 2}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def written_twice(tmp_path: Path, engine: str) -> str:
    """Two days written by ``twice run``, then 2026-11-30 rewritten with other rows: the spec."""
    spec = SPECS[engine].format(tmp=tmp_path)
    pipeline = tmp_path / "pipeline.py"
    pipeline.write_text(PIPELINE.format(spec=spec))
    ledger = str(tmp_path / "ledger.db")
    first = invoke("run", str(pipeline), "--start", "2026-11-30", "--end", "2026-12-02",
                   "--ledger", ledger, "--deadline", "none")
    assert first.exit_code == 0, first.output
    (tmp_path / "v2").touch()
    second = invoke("run", str(pipeline), "--interval", "2026-11-30", "--force",
                    "--ledger", ledger, "--deadline", "none")
    assert second.exit_code == 0, second.output
    return spec


def held(spec: str, partition: str = "2026-11-30") -> list[str]:
    """The versions ``twice diff`` lists (asked for one it cannot hold), as it spells them."""
    out = invoke("diff", spec, "--partition", partition, "--from", "999999", "--to", "999999")
    assert out.exit_code == 2, out.output
    found = re.search(r"versions held: (.*)\)$", out.output, re.MULTILINE)
    assert found, out.output
    return [v.split(" ")[0] for v in found.group(1).split(", ")]


def listed(text: str) -> list[str]:
    """``0..2`` -> 0, 1, 2 (Delta's range); else the value as listed."""
    if ".." in text:
        low, high = text.split("..")
        return [str(v) for v in range(int(low), int(high) + 1)]
    return [text]


FORMS = ["2026-11-30", "day=2026-11-30", "2026-11-30/2026-12-01", "day=2026-11-30/2026-12-01",
         "2026-11-30T00:00/2026-12-01T00:00", "2026-11-30T00:00:00+00:00/2026-12-01T00:00:00+00:00",
         "2026-11-30T00:00+01:00/2026-12-01T00:00Z"]


@pytest.mark.parametrize("engine", sorted(SPECS))
def test_every_partition_form_diffs_the_versions_it_lists(tmp_path: Path, engine: str) -> None:
    spec = written_twice(tmp_path, engine)
    versions = [v for text in held(spec) for v in listed(text)]
    # the slice's first content and its rewrite: the last two versions listed
    old, new = versions[-2], versions[-1]
    if engine == "iceberg":  # ordinals, as the help shows them
        assert versions == ["1", "2", "3"], versions
    for form in FORMS:
        out = invoke("diff", spec, "--partition", form, "--from", old, "--to", new, "--json")
        assert out.exit_code == 0, f"{form}: {out.output}"
        shown = json.loads(out.output)
        assert {k: shown[k] for k in EXPECTED} == EXPECTED, form
        assert (shown["added_keys"], shown["removed_keys"], shown["changed_keys"]) == (
            [{"id": 7}], [{"id": 0}], [{"id": 1}])
    # the other day was written once: the same version on both sides is identical
    last = [v for text in held(spec, "2026-12-01") for v in listed(text)][-1]
    other = invoke("diff", spec, "--partition", "2026-12-01", "--from", last, "--to", last,
                   "--json")
    assert other.exit_code == 0, other.output
    assert json.loads(other.output)["unchanged"] == 4


def test_iceberg_snapshot_ids_still_work(tmp_path: Path) -> None:
    from twice.destinations import open_destination

    spec = written_twice(tmp_path, "iceberg")
    with open_destination(spec) as dest:
        ids = dest.versions()
    assert len(ids) == 3
    by_ordinal = invoke("diff", spec, "--partition", "2026-11-30", "--from", "2", "--to", "3",
                        "--json")
    by_id = invoke("diff", spec, "--partition", "2026-11-30", "--from", str(ids[1]), "--to",
                   str(ids[2]), "--json")
    assert by_ordinal.exit_code == by_id.exit_code == 0, by_ordinal.output + by_id.output
    for out in (by_ordinal, by_id):
        assert {k: json.loads(out.output)[k] for k in EXPECTED} == EXPECTED
    assert json.loads(by_id.output)["to_version"] == 3  # named as listed
    # the listing names each ordinal's snapshot id
    out = invoke("diff", spec, "--partition", "2026-11-30", "--from", "4", "--to", "3")
    assert out.exit_code == 2
    assert f"1 (snapshot {ids[0]}), 2 (snapshot {ids[1]}), 3 (snapshot {ids[2]})" in out.output


@pytest.mark.parametrize("form, option", [
    ("2026-13-40", "--partition"), ("2026-11-30/", "--partition"), ("/2026-12-01", "--partition"),
    ("2026-12-01/2026-11-30", "--partition"), ("2026-11-30/2026-11-30", "--partition"),
    ("day=", "--partition"), ("", "--partition"), ("2026-11-30/nonsense", "--partition"),
])
@pytest.mark.parametrize("engine", ["sqlite", "iceberg"])
def test_bad_partitions_are_one_line_naming_the_option(tmp_path: Path, engine: str, form: str,
                                                       option: str) -> None:
    spec = written_twice(tmp_path, engine)
    out = invoke("diff", spec, "--partition", form, "--from", "1", "--to", "2")
    assert out.exit_code == 2, out.output
    lines = [line for line in out.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("twice diff: error:")]
    assert len(errors) == 1 and option in errors[0], out.output
    assert "Traceback" not in out.output


@pytest.mark.parametrize("engine", sorted(SPECS))
def test_a_version_not_held_is_refused_naming_the_option(tmp_path: Path, engine: str) -> None:
    spec = written_twice(tmp_path, engine)
    out = invoke("diff", spec, "--partition", "2026-11-30", "--from", "1", "--to", "77")
    assert out.exit_code == 2, out.output
    errors = [line for line in out.output.splitlines() if line.startswith("twice diff: error:")]
    assert len(errors) == 1 and "--to 77" in errors[0] and "versions held" in errors[0], (
        out.output)
