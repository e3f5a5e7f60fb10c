"""What every side is asked to do, and the issue's targets for one worker process."""

from __future__ import annotations

#: The issue's targets for one worker process.
TARGET_RPS = 1000.0
TARGET_CPU_MS = 1.0
TARGET_ADDED_P50_MS = 5.0
TARGET_ADDED_P99_MS = 20.0
TARGET_RSS_MB = 150.0
TARGET_DECISION_P99_US = 50.0

PROMPT = "Summarise the attached meeting notes in three bullet points."
MAX_TOKENS = 250
API_KEY = "sk-bench-not-a-secret"
MOCK_MODEL = "bench-model"
