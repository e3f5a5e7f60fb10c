"""Faust agents and views, on the application of ``agents.app``.

Importing a module here builds the application (``agents.app``) and registers
what the module defines on it; the worker imports them all (``switchyard worker``,
app/cli.py). Nothing under ``app/`` imports this package.
"""
