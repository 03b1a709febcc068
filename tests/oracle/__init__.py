"""Exact reference implementations that only tests use: slow, literal readings of the docs."""
