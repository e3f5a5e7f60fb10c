"""Anthropic's Messages API over the log: ``POST /v1/messages`` (JSON or ``stream: true``),
so Claude Code and the Anthropic SDKs use Switchyard's routes.

A Messages request is translated into an OpenAI chat body and goes the chat completions'
way (``Gateway.prepare``: ingest's checks, the key's tenant and routes; then the log),
so it is routed, recorded and replayable like any other; its answer is translated back.
Modules: ``inputs`` (a Messages body as an OpenAI chat body), ``message`` (an answer as
a Message), ``frames`` (a stream's events, the relay's ``Frames``), ``errors``
(Anthropic's error shape), ``api`` (the handlers and their routes).
"""
