"""Tests of the developer scripts (hack/) and of the container image recipe."""
