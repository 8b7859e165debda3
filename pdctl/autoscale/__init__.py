"""Per-role autoscaling: the policy (a pure function of observed metrics) and the replay test
bed that scores it against fixed replicas (docs/autoscaling.md)."""
