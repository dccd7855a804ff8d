"""Streaming scorers: vectorized over all signal columns, state in numpy arrays."""
