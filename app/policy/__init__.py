"""The routing policy in time: providers files read, made documents, numbered, followed
and held.

* :mod:`~app.policy.files`: reading a providers file and the process environment (the
  edge of configuration; the schema is :mod:`app.config`).
* :mod:`~app.policy.document`: a file as the policy document that travels in the log.
* :mod:`~app.policy.log`: the policy topic (proposals, version numbers, following).
* :mod:`~app.policy.holder`: the policy in force in this process.
* :mod:`~app.policy.commands`: ``switchyard policy apply|history``.
"""
