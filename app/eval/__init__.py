"""Evaluate the live service as tau-bench does: a simulated customer talks to the real service
over HTTP, and each conversation is scored by the shop's final data and the agent's words.

tasks (the task file) → gold (expected data) → workers (a database and a service each) →
conversation (customer ⇄ service) → reward → report.
"""
