"""The Vercel AI SDK dialect: the UI message stream of `useChat` over our runs (render.py, endpoint.py)."""
