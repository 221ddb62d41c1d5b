"""Process counters, exposed at GET /metrics in the Prometheus text format.

Per process on purpose: each replica is scraped on its own and Prometheus sums them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HELP = {
    "cs_agent_runs_total": "Runs finished, by status.",
    "cs_agent_run_seconds_total": "Wall time spent in runs.",
    "cs_agent_model_tokens_total": "Model tokens, by direction.",
    "cs_agent_tool_cache_total": "Read-tool cache lookups, by result.",
    "cs_agent_tool_results_total": "Tool results, by status.",
    "cs_agent_thread_busy_total": "Requests refused because the thread had a run.",
    "cs_agent_rate_limited_total": "Requests refused by a rate limit or budget, by limit.",
}


@dataclass
class Metrics:
    counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)

    def add(self, name: str, value: float = 1, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        self.counters[key] = self.counters.get(key, 0) + value

    def render(self) -> str:
        lines: list[str] = []
        for name, text in HELP.items():
            lines += [f"# HELP {name} {text}", f"# TYPE {name} counter"]
            for (metric, labels), value in sorted(self.counters.items()):
                if metric != name:
                    continue
                label_text = ",".join(f'{k}="{v}"' for k, v in labels)
                lines.append(f"{name}{{{label_text}}} {value:g}" if labels else f"{name} {value:g}")
        return "\n".join(lines) + "\n"
