"""Orchestration: the stages of compiler, training, targets and monitor run in order, each result handed to the next."""
