"""``twice intermediates`` on a real ledger: listing, JSON, --expire, bad input (exit 2)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner

from twice.cli.intermediates_cmd import intermediates
from twice.engine.intermediates import format_bytes, materialize_or_reuse
from twice.ledger import Ledger

from .conftest import Counter, HandClock, Store, make_unit


def _ledger_with_one_reuse(tmp_path: Path, store: Store, clock: HandClock) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with Ledger.open(url, clock=clock) as ledger:
        for _ in range(2):
            outcome = materialize_or_reuse(
                ledger, "enriched", make_unit(), compute=Counter(sleep=0.05), store=store.spec,
                owner="team-funds", retention=timedelta(days=7),
            )
    return url, outcome.entry.version


def test_listing_shows_owner_version_status_size_expiry_reuses(
    tmp_path: Path, store: Store, clock: HandClock
) -> None:
    url, version = _ledger_with_one_reuse(tmp_path, store, clock)
    result = CliRunner().invoke(intermediates, ["--ledger", url])
    assert result.exit_code == 0, result.output
    with Ledger.open(url) as ledger:
        entry = ledger.intermediate("enriched", version)
    assert entry is not None
    out = result.output
    for text in (version, "[active]", "owner team-funds", format_bytes(entry.bytes_stored),
                 entry.expires_at.isoformat(), "1 reuse(s)", "stored ", "recommendation: "):
        assert text in out


def test_json_and_expire(tmp_path: Path, store: Store, clock: HandClock) -> None:
    url, version = _ledger_with_one_reuse(tmp_path, store, clock)
    runner = CliRunner()
    listed = json.loads(runner.invoke(intermediates, ["--ledger", url, "--json"]).output)
    (row,) = listed["intermediates"]
    assert (row["version"], row["status"], row["reuseCount"]) == (version, "active", 1)
    assert row["tradeoff"]["reuse_count"] == 1
    assert row["tradeoff"]["recommendation"] in ("keep", "drop")
    # the library's expire() with a clock past retention; the listing then shows the expiry
    later = HandClock(clock.current + timedelta(days=8))
    with Ledger.open(url, clock=later) as ledger:
        from twice.engine.intermediates import expire

        assert [e.version for e in expire(ledger)] == [version]
    after = json.loads(runner.invoke(intermediates, ["--ledger", url, "--json"]).output)
    assert after["intermediates"][0]["status"] == "expired"
    assert after["intermediates"][0]["tradeoff"] is None
    assert store.count() == 0


def test_expire_flag_collects_past_retention(tmp_path: Path, store: Store) -> None:
    # the hand clock starts long before today, so by the system clock this entry is expired
    old = HandClock()
    old.current = old.current.replace(year=2020)
    url, version = _ledger_with_one_reuse(tmp_path, store, old)
    result = CliRunner().invoke(intermediates, ["--ledger", url, "--expire"])
    assert result.exit_code == 0, result.output
    assert f"expired enriched {version}: deleted 50 rows" in result.output
    assert "[expired]" in result.output
    assert store.count() == 0


def test_bad_input_exits_2_naming_the_option(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(intermediates, ["--ledger", str(tmp_path / "none.db")])
    assert missing.exit_code == 2 and "no ledger at" in missing.output
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    Ledger.open(url).close()
    bad = runner.invoke(intermediates, ["--ledger", url, "--storage-price", "-1"])
    assert bad.exit_code == 2 and "--storage-price" in bad.output
    assert "Traceback" not in bad.output
    empty = runner.invoke(intermediates, ["--ledger", url])
    assert empty.exit_code == 0 and "no materialized intermediates" in empty.output
