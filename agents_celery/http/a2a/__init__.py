"""A2A 1.0 (agent-to-agent): an agent of ours served as an A2A agent, its runs as tasks (docs/a2a.md)."""
