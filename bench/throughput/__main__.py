"""The light mock's process: ``python -m bench.throughput serve-light PORT LATENCY_MS``."""

from __future__ import annotations

import sys

from bench.throughput.mocks import serve_light

if len(sys.argv) == 4 and sys.argv[1] == "serve-light":
    serve_light(int(sys.argv[2]), float(sys.argv[3]))
else:
    sys.exit("usage: python -m bench.throughput serve-light PORT LATENCY_MS")
