"""What the guest frameworks share (pydantic-ai: :mod:`..pydantic_ai`, the Agents SDK: :mod:`..openai_agents`): a
segment's journaled units (:mod:`.segment`), the process loop a segment runs on (:mod:`.loop`), and the parts of a
guest agent that are not the framework's (:mod:`.agent`). Imports neither framework."""
