"""What ``switchyard demo`` sends to show each feature of the embedded stack's providers
file (app/embedded/simulated/providers_file.py), and what it reports of each.

The traffic, request by request (deterministic, from the request's index):

* one request in ten is a one-shot question with ``model: "auto"`` (the route's auto
  block picks the model by workload);
* the others are turns of conversations that share a long system prompt (a support
  assistant's instructions, about 1,200 tokens), :data:`AT_ONCE` conversations at a time,
  :data:`TURNS` turns each, every turn sending the conversation so far with its
  ``session_id``: the simulated providers read the prompt from their caches once they
  have seen it, and cache affinity keeps each conversation on the deployment that did;
* one conversation in four is tenant ``demo-team``'s: under its budget, and walking its
  dynamic route (a split by session between two routing modes).

The report (:class:`Features`): the auto router's picks by model, the share of input
tokens read from prompt caches, the share of decisions that followed an affinity pin,
the tenant's budget as its ledger holds it (the worker's ``/admin/budgets``), and the
dynamic route's hits by branch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.embedded.simulated.providers_file import SHOWCASE_TENANT
from app.embedded.stack import EmbeddedStack

#: Conversations under way at once, and turns per conversation: at 40 requests a second,
#: a conversation's turns come 1.7 s apart, after the previous turn's answer.
AT_ONCE = 60
TURNS = 8
#: One request in this many is a one-shot ``model: "auto"`` question.
AUTO_EVERY = 10
#: One conversation in this many is the showcase tenant's.
TENANT_EVERY = 4

AUTO_PROMPTS = (
    "Summarise the attached meeting notes in three bullet points.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Traduis en anglais : le routeur choisit le meilleur fournisseur.",
    "Explain step by step why the sky is blue.",
    "Classify this review as positive or negative: the delivery was late.",
    "Design a lock-free multi-producer, single-consumer queue in Rust for a trading "
    "system's order gateway. Explain the memory orderings you choose for each atomic "
    "operation and why weaker ones would be wrong, prove step by step that the queue is "
    "linearizable and free of ABA problems, then write the implementation with its unsafe "
    "blocks documented, property-based tests with proptest that compare it to a "
    "mutex-based queue under random interleavings, and a criterion benchmark of both. "
    "Finish with the trade-offs against a bounded ring buffer.",
)
_RULES = (
    "Greet the customer once, by name when it is known.",
    "Answer in the language of the question; keep product names in English.",
    "Never promise a delivery date; give the carrier's tracking link instead.",
    "Refunds above 200 EUR need a supervisor: say so and open a ticket.",
    "Quote prices with their currency and say whether tax is included.",
    "When a question is unclear, ask one question back before answering.",
    "Do not share internal ticket numbers or the names of colleagues.",
    "Summarise long answers in two sentences at the end.",
)
#: The support assistant's instructions every conversation starts with (~4,900 chars).
SYSTEM_PROMPT = "You are the support assistant of a mail-order shop.\n" + "\n".join(
    f"{n + 1}. {_RULES[n % len(_RULES)]} (rule {n + 1} of 60)" for n in range(60)
)


def showcase_request(index: int) -> dict[str, Any]:
    """The demo's ``index``-th request (without its id)."""
    if index % AUTO_EVERY == AUTO_EVERY - 1:
        prompt = AUTO_PROMPTS[(index // AUTO_EVERY) % len(AUTO_PROMPTS)]
        return {"model": "auto", "messages": [{"role": "user", "content": prompt}]}
    turn_index = index - index // AUTO_EVERY  # among the conversations' requests
    block, place = divmod(turn_index, AT_ONCE * TURNS)
    turn = place // AT_ONCE + 1
    conversation = block * AT_ONCE + place % AT_ONCE
    messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    for earlier in range(1, turn):
        messages.append({"role": "user", "content": _question(conversation, earlier)})
        messages.append({"role": "assistant", "content": f"(the answer to question {earlier})"})
    messages.append({"role": "user", "content": _question(conversation, turn)})
    request: dict[str, Any] = {
        "model": "chat",
        "messages": messages,
        "session_id": f"demo-conversation-{conversation}",
    }
    if conversation % TENANT_EVERY == 0:
        request["tenant"] = SHOWCASE_TENANT
    return request


def _question(conversation: int, turn: int) -> str:
    return (
        f"Customer {conversation}, question {turn}: my order {1000 + conversation} of "
        f"{turn + 1} items has not arrived; what can you do, and what does it cost?"
    )


@dataclass
class Features:
    """What the demo's decisions and outcomes show of each feature."""

    auto_picks: Counter[str] = field(default_factory=Counter)
    dynamic_hits: Counter[str] = field(default_factory=Counter)
    decisions: int = 0
    affinity_decisions: int = 0
    tokens_in: int = 0
    tokens_cached: int = 0
    #: Each budget's ledger as the worker reports it (``/admin/budgets``).
    budgets: dict[str, dict[str, Any]] = field(default_factory=dict)

    def take_decision(self, decision: dict[str, Any]) -> None:
        self.decisions += 1
        if decision.get("selection_rule") == "affinity":
            self.affinity_decisions += 1
        if decision.get("attempt") != 1:
            return
        auto = decision.get("auto")
        if auto:
            self.auto_picks[auto.get("model") or decision["model"]] += 1
        dynamic = decision.get("dynamic")
        if dynamic:
            self.dynamic_hits[f"{dynamic['graph']}/{dynamic['path'].get('end')}"] += 1

    def take_outcome(self, outcome: dict[str, Any]) -> None:
        self.tokens_in += outcome.get("tokens_in") or 0
        self.tokens_cached += outcome.get("tokens_cached") or 0

    @property
    def cache_hit_rate(self) -> float:
        """The share of input tokens the providers read from their prompt caches."""
        return self.tokens_cached / self.tokens_in if self.tokens_in else 0.0

    @property
    def affinity_share(self) -> float:
        """The share of decisions that followed an affinity pin."""
        return self.affinity_decisions / self.decisions if self.decisions else 0.0


async def read_budgets(stack: EmbeddedStack) -> dict[str, dict[str, Any]]:
    """Every ledger the stack's workers fold, as ``/admin/budgets`` reports it."""
    found: dict[str, dict[str, Any]] = {}
    async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
        for worker in stack.workers:
            try:
                reply = await client.get(
                    f"{worker.web_url}/admin/budgets", headers=worker.admin_headers
                )
                found.update(reply.json())
            except (httpx.HTTPError, ValueError):
                continue  # a worker that does not answer: its ledgers are not shown
    return found


def render_features(
    auto_picks: dict[str, int],
    cache_hit_rate: float,
    affinity_share: float,
    budgets: dict[str, dict[str, Any]],
    dynamic_hits: dict[str, int],
) -> list[str]:
    """The summary's lines about the features."""
    picks = ", ".join(f"{m} {n}" for m, n in sorted(auto_picks.items())) or "none"
    hits = ", ".join(f"{b} {n}" for b, n in sorted(dynamic_hits.items())) or "none"
    lines = [
        "features:",
        f"  auto router    {sum(auto_picks.values())} requests with model auto: {picks}",
        f"  prompt cache   {cache_hit_rate:.1%} of input tokens read from the providers' caches",
        f"  affinity       {affinity_share:.1%} of decisions followed a pin "
        "(selection_rule affinity)",
    ]
    for scope, ledger in sorted(budgets.items()):
        spent = ledger.get("spent_day_usd", 0.0)
        limit = ledger.get("limit_day_usd")
        of = f" of ${limit:.2f}" if isinstance(limit, int | float) else ""
        held = ledger.get("held_usd", 0.0)
        lines.append(f"  budget         {scope}: ${spent:.4f}{of} spent today, ${held:.4f} held")
    lines.append(f"  dynamic route  requests by graph/branch: {hits}")
    return lines
