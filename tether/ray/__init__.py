"""Scale-out on Ray: rollout workers on many nodes, policy-server replicas, a multi-rank learner.

- `cluster.py`: `--ray [ADDRESS]` (connect or start), the advertised host, the placement report;
- `workers.py`: rollout-worker actors, each running the worker pool (`tether.runner.pool`) on its node
  against the store over HTTP, launching the unmodified agent there;
- `replicas.py`: replica actors hosting any registered policy server kind, one sticky upstream over them;
- `learner.py`: the learner of N ranks (one `torch.distributed` group);
- `placement.py`: `RayPlacement`, what `--ray` places: the workers' pools, the replicas, the ranks;
- `transfer.py`: how folders (weights, checkpoints) reach other nodes: by path on a shared filesystem,
  else through Ray's object store.

Nothing here is imported by `import tether`; Ray is needed only when `--ray` is used.
"""
