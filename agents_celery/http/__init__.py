"""The HTTP protocol, written once for every front end (Flask, Django): request bodies, errors and their
statuses, the AgentOS and AG-UI dialects, SSE framing. No web framework is imported here."""
