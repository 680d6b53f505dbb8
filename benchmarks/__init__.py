"""Benchmarks that measure the product code paths on public data sets (see benchmarks/report.py)."""
