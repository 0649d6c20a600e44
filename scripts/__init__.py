"""Maintenance and demo scripts (build_catalog.py, demo_checkpoint.py); importable so the tests share their builders."""
