"""Settlement: which evidence proves what, in which order (docs/architecture.md, "Settlement").
One file per rule, each reproducing a failure found by an adversarial check."""
