"""The executor's provider call: one pooled HTTP client, one call, one outcome."""
