"""Switchyard: an event-sourced LLM router."""

__version__ = "0.1.0"
