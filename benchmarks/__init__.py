"""Benchmark suites, run by scripts/benchmark.py; outside the rl package (not installed)."""
