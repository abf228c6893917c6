# One image for every process of a deployment: the API (gunicorn), the workers and Flower.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app

# Dependencies first, so a code change does not reinstall them.
COPY pyproject.toml README.md LICENSE ./
COPY agents_celery ./agents_celery
RUN pip install '.[server]'

# The deployable API (api/wsgi.py, api/gunicorn.conf.py) and the demo agents module the Procfile and
# docker-compose name (examples.agents); replace the latter with your own (AGENTS_CELERY_AGENTS / --agents).
COPY api ./api
COPY examples ./examples

RUN useradd --create-home --uid 10001 agents
USER agents

# Inside a container the API must listen on every interface for a published port to reach it (outside one,
# api/gunicorn.conf.py binds 127.0.0.1 unless told).
ENV AGENTS_CELERY_API_HOST=0.0.0.0
EXPOSE 7777 5555
CMD ["gunicorn", "-c", "api/gunicorn.conf.py", "api.wsgi:app"]
