"""The router service: the routing core driven against the log, without Faust.

:mod:`~app.router.pipeline` folds each routing-log event with the core
(:mod:`app.routing`), sends what the step produced (:mod:`~app.router.outbox`), writes
the route's row once those sends are acknowledged, and says which events are then safe
to ack. What it reads and writes it is given (:class:`~app.router.ports.RouterPorts`):
the router agent (``agents/router.py``) binds them to the worker's topics and tables,
tests to fakes.
"""
