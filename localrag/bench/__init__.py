"""Benchmarks: ``python -m localrag bench <suite> ...`` (ratios measured in one process)."""
