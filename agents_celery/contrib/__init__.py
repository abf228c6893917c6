"""Integrations with web frameworks: :mod:`.flask` (a blueprint) and :mod:`.django` (a reusable app)."""
