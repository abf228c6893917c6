"""Runnable examples: a demo agents module, and Flask and Django apps that already use Celery."""
