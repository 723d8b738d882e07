"""The Ray tests' cluster is `ray_cluster` in `tests/conftest.py` (the vLLM tests use it too)."""
