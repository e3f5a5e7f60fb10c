"""Faust agents. Importing this package registers all of them on ``app.faust_app.app``."""

from agents import executor, feedback, ingest, router

__all__ = ["executor", "feedback", "ingest", "router"]
