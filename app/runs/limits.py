"""What a post (a message or a resume) must pass before its run starts: the user's post rate
and the day's model-token budget, checked by the statement that opens the run
(`cs_begin_run`, app/migrations/versions/0010), and what each refusal tells the client.

A rate is a GCRA (generic cell rate algorithm) over one row of `rate_limits`: `burst`
requests at once, then one per emission interval (app/api/ratelimit.py holds the other
limits). The budget reads the user's counter of the day (`token_usage`), which the
statement that closes a run adds to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from app.config import Settings
from app.errors import Conflict, RateLimited, ThreadBusy
from app.metrics import Metrics

POSTS = "too many messages; wait a moment before sending the next one"
BUDGET = "today's model budget for this account is used up; it renews at midnight UTC"
DELETED = (
    "this message was already sent in a conversation that has since been deleted;"
    " send it with a new client_message_id to start a new one"
)


@dataclass(frozen=True)
class Limit:
    name: str
    interval_s: float  # one request per interval, once the burst is spent
    burst: int

    @property
    def window_s(self) -> float:
        return self.interval_s * self.burst

    def retry_after_s(self, ahead_s: float) -> int:
        """When a refused request would pass, from how far the key's tat lies ahead."""
        return math.ceil(ahead_s + self.interval_s - self.window_s)


def limit(name: str, rate: float, per_s: float, burst: int) -> Limit | None:
    return Limit(name, per_s / rate, burst) if rate > 0 else None


class PostGate:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.posts = limit(
            "posts", settings.rate_limit_posts_per_minute, 60, settings.rate_limit_posts_burst
        )
        self.budget = settings.token_budget_per_day
        self.lease_ttl_s = settings.thread_lease_ttl_s
        self.metrics = metrics

    def rate(self, user_id: str) -> dict[str, Any]:
        """The post rate's parameters for the opening statement (empty: no limit)."""
        if self.posts is None:
            return {}
        return {
            "key": f"posts:{user_id}",
            "interval_s": self.posts.interval_s,
            "window_s": self.posts.window_s,
        }

    def count(self, status: str) -> None:
        """A refusal of the opening statement, in the metrics."""
        limit = {"rate_limited": "posts", "budget_exhausted": "token_budget"}.get(status)
        if limit is not None:
            self.metrics.add("cs_agent_rate_limited_total", limit=limit)

    def refuse(self, status: str, wait_s: float) -> Exception:
        """The error for a post the opening statement refused with `status`."""
        if status == "rate_limited" and self.posts is not None:
            return RateLimited(POSTS, retry_after_s=self.posts.retry_after_s(wait_s))
        if status == "deleted":
            return Conflict(DELETED, code="message_deleted")
        if status == "budget_exhausted":
            return RateLimited(
                BUDGET, code="token_budget_exhausted", retry_after_s=math.ceil(wait_s)
            )
        return ThreadBusy(retry_after_s=math.ceil(wait_s), window_s=math.ceil(self.lease_ttl_s))
