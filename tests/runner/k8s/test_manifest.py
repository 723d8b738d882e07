"""Names and labels Tether gives Kubernetes objects: valid for the API server whatever the ids."""

from __future__ import annotations

import re

from tether.runner.k8s.manifest import AttemptRef, dns_name, label_value

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def test_job_names_are_dns_labels_of_at_most_63_characters_and_stay_distinct() -> None:
    short = AttemptRef("ro-0123456789abcdef", 3, "run")
    assert short.job_name == "tether-rollout-ro-0123456789abcdef-3"
    long_a = AttemptRef("Rollout_" + "x" * 80 + "A", 1, None).job_name
    long_b = AttemptRef("Rollout_" + "x" * 80 + "B", 1, None).job_name
    for name in (short.job_name, long_a, long_b, dns_name("--Weird..Name--")):
        assert len(name) <= 63 and DNS_LABEL.match(name), name
    assert long_a != long_b  # truncated names keep a hash of the whole


def test_label_values_are_valid_for_any_run_name() -> None:
    for run in ("rollout-tasks-1a2b", "my run / v2 (fresh)", "x" * 100, "~archived~1", ""):
        value = label_value(run)
        assert len(value) <= 63 and LABEL_VALUE.match(value), value
    assert label_value("rollout-tasks-1a2b") == "rollout-tasks-1a2b"  # a valid value is kept as it is
    assert label_value("a b") != label_value("a_b")
    labels = AttemptRef("ro-1", 2, "my run").labels()
    assert labels["tether/attempt"] == "2" and labels["app.kubernetes.io/managed-by"] == "tether"
