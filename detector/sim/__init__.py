"""Simulated GPU cluster internals; import the public API from detector.simulate."""
