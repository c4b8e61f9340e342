"""Drivers choose WHICH (task, interval) units run and WHEN; the engine runs each one.

``backfill`` (a plan plus a listener that collects results), ``worker`` (a fleet member that
claims units) and ``airflow`` (one Airflow try per call). ``twice run`` is the CLI's direct use
of the engine. A driver may import the engine and everything below it, never another driver.
"""
