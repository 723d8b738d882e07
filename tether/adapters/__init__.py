"""Adapters from recorded traces to training data."""

from tether.adapters.build import TransitionReport, build_transitions, transitions_of
from tether.adapters.export import read_jsonl, to_hf_dataset, write_jsonl
from tether.adapters.transitions import Transition

__all__ = [
    "Transition",
    "TransitionReport",
    "build_transitions",
    "read_jsonl",
    "to_hf_dataset",
    "transitions_of",
    "write_jsonl",
]
