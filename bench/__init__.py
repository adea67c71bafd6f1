"""Benchmarks (run as ``python -m bench.<name>``); not timed tests."""
