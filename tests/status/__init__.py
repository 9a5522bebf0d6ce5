"""Tests of status logic, the status writer, events and metrics (status/)."""
