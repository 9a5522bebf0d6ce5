"""Tests of the workspace engine (``workspace``), mirroring its modules."""
