"""The routing console: server-rendered pages over the analytics store
(app/analytics/), served by ``switchyard console``; assets in ``static/``."""
