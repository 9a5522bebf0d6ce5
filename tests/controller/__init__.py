"""Unit tests for the controller machinery (clock, rate limiters, work queue)."""
