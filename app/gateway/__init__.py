"""The OpenAI-compatible gateway over the log (docs/gateway.md)."""
