"""The agents modules the tests' workers load (``AGENTS_CELERY_AGENTS=tests.agents.fixture,...``)."""
