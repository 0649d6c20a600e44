"""Test doubles for hardware the test machine does not have."""
