"""What the tests run on: worker and API processes, fault tools, proxies, the invariant checker, the skip
guard, and the Celery apps of a host project."""
