"""Operator analytics: one outcome per conversation (a sweep), summaries and flags."""
