"""The bottom of the event contract: models ``app.events`` is built from.

Nothing here imports any other ``app`` module: pydantic and the standard library only.
"""
