"""Which tasks a step trains on: pools of active, retired and parked tasks read from the store (`pools.py`),
the seeded task order (`cursor.py`), and the probe that sorts them before RL (`probe.py`)."""
