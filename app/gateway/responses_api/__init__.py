"""OpenAI's Responses API over the log: ``POST /v1/responses`` and ``GET
/v1/responses/{id}``, with conversations rebuilt from the log (``previous_response_id``).

A Responses request is a chat request like any other on ``llm.requests`` (routed,
recorded, replayable); the gateway adds a ``turn`` (app/contract/turn.py: log positions
and flags, no text) that links it to its conversation's previous turn. Modules:
``ids`` (response and item ids), ``inputs`` (a body as chat messages and knobs),
``history`` (a conversation's next messages), ``objects`` (the Response object),
``frames`` (the stream's events), ``turns`` (the previous turn read from the log by
position), ``marks`` (where a request's answer will be), ``api`` (the handlers).
"""
