"""The `autoscaling` section: per-role replica bounds, the metric each role scales on, the
cooldowns and the GPU budget (docs/autoscaling.md). The per-instance targets come from the
capacity plan at the workload's SLOs (pdctl/plan/autoscale.py) unless `target` is written."""

from typing import Literal

from pydantic import Field, model_validator

from pdctl.spec.base import Section, pattern, refuse

Metric = Literal["waiting", "kvUsage", "requestRate"]


class RoleScaling(Section):
    """How one role (serve, prefill or decode) scales."""

    min_replicas: int = Field(1, ge=1, le=10_000, description="Fewest instances of the role.")
    max_replicas: int = Field(
        ..., ge=1, le=10_000, examples=[4], description="Most instances of the role."
    )
    metric: Metric = Field(
        "waiting",
        description="What the role scales on, per instance: `waiting` (vllm:num_requests_waiting"
        ": half the requests one instance may queue and still meet workload.ttftMs), "
        "`kvUsage` "
        "(vllm:kv_cache_usage_perc, the KV share the SLO batch fills) or `requestRate` "
        "(rate of vllm:request_success_total, the requests/s one instance carries at the SLOs).",
    )
    target: float | None = Field(
        None, gt=0, le=1_000_000, examples=[4],
        description="The per-instance target, written instead of derived. Derived from the "
        "capacity plan at workload's SLOs (`pdctl render` writes each derivation in the "
        "annotation pdctl.io/autoscale-target): waiting = 0.5 x (workload.ttftMs, else 1 s, - "
        "one prefill) / seconds each queued request holds the instance, at least 1; kvUsage "
        "= planned decode batch x mean context / KV-cache tokens, within [0.1, 0.9]; "
        "requestRate = 0.8 / seconds of prefill (prefill), of decode (decode) or of both "
        "(serve) a request. Written: waiting requests, a KV usage fraction (0-1] or requests/s.",
    )
    scale_up_s: int = Field(
        30, ge=0, le=3600, description="Seconds after a scale action before scaling up again."
    )
    scale_down_s: int = Field(
        300, ge=0, le=86_400, description="Seconds after a scale action before scaling down."
    )

    @model_validator(mode="after")
    def _bounds(self) -> "RoleScaling":
        if self.min_replicas > self.max_replicas:
            raise refuse(
                f"minReplicas {self.min_replicas} is above maxReplicas {self.max_replicas}",
                "make minReplicas at most maxReplicas",
            )
        if self.metric == "kvUsage" and self.target is not None and self.target > 1:
            raise refuse(
                f"target {self.target} for kvUsage is above 1 (the metric is a fraction)",
                "write the KV usage target as a fraction, e.g. 0.8",
            )
        return self


class Autoscaling(Section):
    """Per-role autoscaling (Kubernetes: an HPA or a KEDA ScaledObject per role)."""

    engine: Literal["hpa", "keda"] = Field(
        "hpa",
        description="`hpa`: an autoscaling/v2 HorizontalPodAutoscaler on Pods metrics served "
        "by a metrics adapter (prometheus-adapter); `keda`: a KEDA ScaledObject with a "
        "Prometheus trigger.",
    )
    prometheus: str | None = Field(
        None, min_length=1, max_length=2048,
        pattern=pattern(
            r"https?://[^\s'\"]+", "an http(s) URL without spaces or quotes",
            "write the URL as e.g. http://prometheus-operated.monitoring:9090",
        ),
        description="Prometheus URL KEDA queries (`engine: keda`), e.g. "
        "http://prometheus-operated.monitoring:9090.",
    )
    max_gpus: int | None = Field(
        None, ge=1, le=1_000_000, examples=[16],
        description="GPU budget: the roles' maxReplicas x GPUs per instance must fit it; the "
        "policy never scales past it.",
    )
    serve: RoleScaling | None = Field(None, description="The serve role (phases 0 and 1).")
    prefill: RoleScaling | None = Field(None, description="Prefill (phases 2 and 3).")
    decode: RoleScaling | None = Field(None, description="Decode (phases 2 and 3).")

    @model_validator(mode="after")
    def _keda_server(self) -> "Autoscaling":
        if self.engine == "keda" and self.prometheus is None:
            raise refuse(
                "engine keda needs the Prometheus URL its trigger queries",
                "set autoscaling.prometheus, e.g. http://prometheus-operated.monitoring:9090",
            )
        if self.serve is None and self.prefill is None and self.decode is None:
            raise refuse(
                "autoscaling names no role",
                "add autoscaling.serve (phases 0, 1) or autoscaling.prefill / .decode",
            )
        return self

    def roles(self) -> tuple[tuple[str, RoleScaling], ...]:
        """(role, its settings) of every role written, in serve, prefill, decode order."""
        out = (("serve", self.serve), ("prefill", self.prefill), ("decode", self.decode))
        return tuple((name, s) for name, s in out if s is not None)
