"""Faust agents. Importing this package registers all of them on ``app.faust_app.app``."""

from agents import executor, feedback, handoff, ingest, router

__all__ = ["executor", "feedback", "handoff", "ingest", "router"]
