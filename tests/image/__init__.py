"""Tests that build the operator's image with testbed.image and run it with the real engine."""
