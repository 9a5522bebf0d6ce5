"""Tests of the composition root: the operator's flags, wiring and entry point."""
