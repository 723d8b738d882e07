"""The Ray cluster, and how folders reach its nodes: what every Ray part shares.

- `cluster.py`: `--ray [ADDRESS]` (connect or start), the advertised host, the placement report;
- `transfer.py`: how folders (weights, checkpoints) reach other nodes: by path on a shared filesystem,
  else through Ray's object store.

The Ray part of each seam lives under that seam: the rollout-worker pool in `tether.runner.ray_pool`,
the policy-server replicas in `tether.policy_server.ray_replicas`, the learner's ranks in
`tether.learner.ray_learner`, and `RayPlacement`, which places all three, in
`tether.placement.ray`. Nothing here is imported by `import tether`; Ray is needed only when
`--ray` is used.
"""
