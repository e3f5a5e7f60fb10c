"""Embedded, network-free stand-ins for ``switchyard demo`` (e.g. simulated providers)."""
