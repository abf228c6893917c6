"""Benchmarks of agents-celery: ``python -m bench [--quick] [--only NAME]``. Every figure is a ratio to a floor."""
