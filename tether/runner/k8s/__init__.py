"""The Kubernetes runner (`--runner k8s`): each attempt runs as one Job from a Jinja template.

`options.py` the settings, `manifest.py` the Job and Secret of an attempt, `api.py` the calls made
through the official client, `preflight.py` the checks before a batch, `reconciler.py` creating Jobs
and learning how they ended, `job_agent.py` one attempt as one Job, `pool.py` all of it behind the
runner seam, `relay.py` how pods reach the gateway, `cli.py` the command-line options and `prepare.py`
the checks they run before anything starts. See docs/kubernetes.md.
"""
