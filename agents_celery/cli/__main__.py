"""``python -m agents_celery.cli``: the same as the ``agents-celery`` command."""

import sys

from .main import main

sys.exit(main())
