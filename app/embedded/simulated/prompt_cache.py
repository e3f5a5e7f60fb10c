"""The simulated providers' prompt caches: cached tokens for a prefix seen recently.

Each simulated provider keeps what OpenAI's and Anthropic's prompt caches keep: the
prefixes of the prompts it answered, cut at message boundaries. A call reads the
longest prefix of its messages the provider answered within :data:`TTL_S` (each use
keeps an entry that long again), and reports it as
``usage.prompt_tokens_details.cached_tokens`` when it is at least
:data:`MIN_CACHED_TOKENS` long (OpenAI's minimum); shorter prompts are never cached.
Tokens are counted as the simulator counts a prompt (characters / 4), so a cached
prefix is never more than the prompt.

So a conversation with a long system prompt reads that system prompt from the second
time a provider sees it, and its whole history from its second turn on the same
provider: what makes cache affinity pin it there. Deterministic for a given order of
calls (the clock only expires entries, after five minutes); at most
:data:`MAX_ENTRIES` prefixes per provider, the least recently used dropped first.
Hashes only: no prompt text is kept.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from app.embedded.simulated.openai_format import message_text

#: The shortest prefix a provider reports as cached (tokens), as OpenAI's caches.
MIN_CACHED_TOKENS = 1024
#: How long an entry stays after its last use (seconds).
TTL_S = 300.0
#: Prefixes kept per provider.
MAX_ENTRIES = 20_000


def prefixes(messages: Sequence[Any]) -> list[tuple[str, int]]:
    """(hash, tokens) of each message-boundary prefix of ``messages``, shortest first."""
    digest = hashlib.sha256()
    chars = 0
    found = []
    for message in messages:
        digest.update(json.dumps(message, sort_keys=True, default=str).encode())
        digest.update(b"\x1e")
        chars += len(message_text(message))
        found.append((digest.copy().hexdigest(), chars // 4))
    return found


class PromptCache:
    """One provider's cache of prompt prefixes (hashes and last use)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: OrderedDict[str, float] = OrderedDict()

    def serve(self, messages: Sequence[Any]) -> int:
        """Tokens read from the cache for a call with ``messages``; then the call's own
        prefixes are cached."""
        return self.read(prefixes(messages), self._clock())

    def read(self, found: Sequence[tuple[str, int]], now: float) -> int:
        """Tokens read from the cache at ``now`` by a prompt whose message-boundary
        prefixes are ``found`` ((hash, tokens), shortest first); then they are cached."""
        read = 0
        for key, tokens in found:
            last = self._entries.get(key)
            if last is None or now - last > TTL_S:
                break
            read = tokens
        for key, _ in found:
            self._entries[key] = now
            self._entries.move_to_end(key)
        while len(self._entries) > MAX_ENTRIES:
            self._entries.popitem(last=False)
        return read if read >= MIN_CACHED_TOKENS else 0

    def clear(self) -> None:
        self._entries.clear()
