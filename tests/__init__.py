"""Tests mirror the packages; testbed/ holds the real-component fixtures."""
