"""Training: the loop (`loop.py`) that composes the runner, the gateway, the policy server, the learner
(`tether.learner`) and the curriculum (`tether.curriculum`) into steps, validations and checkpoints."""
