"""Tests of the benchmarks' own logic (no benchmark runs here)."""
