"""The HTTP surface: the Litestar app, the OpenAI-compatible handlers, the error contract."""
