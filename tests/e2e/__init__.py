"""End-to-end tests: the operator process against the real control plane, CLI and git."""
