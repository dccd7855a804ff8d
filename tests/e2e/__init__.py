"""Helpers of the end-to-end test (tests/test_e2e.py): real processes, a webhook receiver and
the config templates they start from."""
