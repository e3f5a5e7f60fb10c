"""The routing policy: what providers.yaml declares and how a version of it is made,
numbered, followed and held.

* :mod:`~app.policy.schema`: the providers file's schema (providers, models, routes,
  tenants, presets, guardrails), parsed from a mapping with the environment it is
  given; :mod:`~app.policy.access` (API keys, budgets, credentials),
  :mod:`~app.policy.auto` (the auto router, cache affinity) and
  :mod:`~app.policy.dynamic_routes` (route graphs) are its parts.
* :mod:`~app.policy.files`: reading a providers file and the process environment (the
  edge of configuration).
* :mod:`~app.policy.document`: a file as the policy document that travels in the log.
* :mod:`~app.policy.log`: the policy topic (proposals, version numbers, following).
* :mod:`~app.policy.holder`: the policy in force in this process.
* :mod:`~app.policy.commands`: ``switchyard policy apply|history``.

The routing core reads the schema only; it never loads files or reads the environment.
"""
