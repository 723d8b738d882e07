"""Prompt search: candidate system prompts run through the unmodified agent and scored (`search.py`: the
budget, the optimizer model, candidate runs), by APO (`apo.py`: critique and rewrite, beam by beam) or
Pareto search (`pareto.py`: keep the prompts best on some task, mutate and merge them)."""
