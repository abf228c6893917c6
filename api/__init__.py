"""The deployable HTTP service: ``gunicorn -c api/gunicorn.conf.py api.wsgi:app``."""
