"""Helper functions shared by the tests, by subsystem (fixtures live in conftest.py files)."""
