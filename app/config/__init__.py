"""``providers.yaml``'s schema: what a routing policy declares, and nothing that loads it.

* :mod:`~app.config.providers`: providers and their models (prices, limits, what each
  model serves), deployment ids;
* :mod:`~app.config.schema`: routes, tenants, presets, guardrails, and the whole
  :class:`~app.config.schema.RoutingConfig`, parsed from a mapping with the environment
  it is given (never the process's);
* :mod:`~app.config.access`: the gateway's API keys, budgets and limits, credentials;
* :mod:`~app.config.auto`: the auto router and cache affinity of a route;
* :mod:`~app.config.dynamic_routes`: dynamic routes (graphs of nodes).

The routing core reads it; reading files and the environment, versions and the policy
topic are :mod:`app.policy`'s.
"""
