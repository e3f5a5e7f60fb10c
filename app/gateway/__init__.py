"""The OpenAI-compatible gateway over the log (issue 12)."""
