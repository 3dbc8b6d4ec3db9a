"""Benchmark workloads and the ``make bench`` runner."""
