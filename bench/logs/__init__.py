"""Recorded logs made for the tests and the benches, never for the product.

* :mod:`~bench.logs.synthetic`: a routing log made by the live fold against simulated
  providers (retries, a saturated deployment, a failing one whose breaker opens).
* :mod:`~bench.logs.sample`: that log dressed as a live one (tenants, grades, policy
  changes), for the analytics store's and the console's tests and the trace bench.
"""
