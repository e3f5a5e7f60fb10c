"""Faust agents. Importing this package registers all of them on ``app.faust_app.app``."""

from agents import executor, ingest, router

__all__ = ["executor", "ingest", "router"]
