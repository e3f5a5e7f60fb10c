"""What every side is asked to do, and the performance targets for one worker process."""

from __future__ import annotations

#: The performance targets for one worker process (docs/design.md#performance-targets):
#: added latency at the light rate (20 req/s),
#: requests/s at saturation (and at least 4x LiteLLM's), worker CPU per request at
#: saturation, peak RSS, and a 16-candidate decision's p99 (thompson has its own).
TARGET_RPS = 500.0
TARGET_RPS_VS_LITELLM = 4.0
TARGET_CPU_MS = 1.5
TARGET_ADDED_P50_MS = 15.0
TARGET_ADDED_P99_MS = 40.0
TARGET_RSS_MB = 150.0
TARGET_DECISION_P99_US = 100.0
TARGET_THOMPSON_P99_US = 250.0

PROMPT = "Summarise the attached meeting notes in three bullet points."
MAX_TOKENS = 250
API_KEY = "sk-bench-not-a-secret"
MOCK_MODEL = "bench-model"
