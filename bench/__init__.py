"""Benchmarks: ``switchyard bench quality`` (routing quality in simulated scenarios)."""
