"""The executor tests' ledger fixtures (a SQLite ledger on a manual clock), shared here."""

from tests.executor.conftest import clock, ledger, ledger_url

__all__ = ["clock", "ledger", "ledger_url"]
