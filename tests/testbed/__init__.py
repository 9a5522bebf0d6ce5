"""Tests of the test bed itself (package ``testbed``)."""
