"""A publish observer: counts publish attempts per destination type and outcome, and writes the
counts to the host's log every `every` events (`[config] every`, default 100).

It sees only types and outcomes, never payloads. The counts live in the instance it runs in: its
manifest sets `max_concurrency = 1`, so one instance sees every event, and its counts start again
when the host retires it (after 1,000 calls).
"""

from collections import Counter
from typing import Optional

import outbox_sdk as sdk

_counts: "Counter[str]" = Counter()
_seen = 0
_every: Optional[int] = None


def _interval() -> int:
    global _every
    if _every is None:
        try:
            _every = max(1, int(sdk.config("every", "100") or "100"))
        except ValueError:
            sdk.warn("[config] every is not a whole number; using 100")
            _every = 100
    return _every


class Observer(sdk.PublishObserver):
    def completed(self, event: sdk.Completed, envelope: sdk.Envelope) -> None:
        global _seen
        _counts[f"{event.destination_type}/{event.outcome}"] += 1
        _seen += 1
        if _seen % _interval() == 0:
            summary = ", ".join(f"{key}={count}" for key, count in sorted(_counts.items()))
            sdk.info(f"after {_seen} events: {summary}")
