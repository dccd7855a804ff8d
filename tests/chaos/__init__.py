"""Misbehaving scrape targets and a fake Alertmanager for the reliability tests and bench."""
