"""The one unit lifecycle (``engine.executor``): claim (lease and fencing token), plan, attempt,
write (commit record), verify (acceptance and fingerprint), settle, and the typed events it emits.

Pools, timeouts, reconciliation, cost guards and intermediates live here because only the
lifecycle uses them. It may import core, define, ledger, destinations and remote; never drivers,
reports or the CLI. The protocol is written once in docs/architecture.md.
"""
