"""Policies as versioned data (issue 42): the agent's rules as immutable numbered versions,
one live, at most one candidate for a share of new conversations; each thread pinned to
one version by the statement that opens its runs. docs/policies.md.

Here: the versions' tables (store), their text (render, texts) and files (files). The gate
that evaluates a version is app/eval/policy_gate.py; the commands are app/cli_policies.py."""
