# One image for every process of a deployment: the API (gunicorn), the workers and Flower.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app

# Dependencies first, so a code change does not reinstall them.
COPY pyproject.toml README.md ./
COPY agents_celery ./agents_celery
RUN pip install '.[server]'

# The demo agents module; replace with your own (AGENTS_CELERY_AGENTS / --agents).
COPY examples ./examples

RUN useradd --create-home --uid 10001 agents
USER agents

EXPOSE 7777 5555
CMD ["gunicorn", "agents_celery.api:create_app()", "--bind", "0.0.0.0:7777", "--worker-class", "gevent", "--workers", "2", "--worker-connections", "2000"]
