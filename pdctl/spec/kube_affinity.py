"""Kubernetes scheduling shapes for the spec: affinity (node, pod, pod anti-affinity),
topology spread constraints, label selectors. Field names and rules are the API server's
(core/v1 and meta/v1 validation), so a spec that passes here is accepted there."""

from typing import Literal

from pydantic import Field, model_validator

from pdctl.spec.base import DnsLabel, Section
from pdctl.spec.value import LabelKey, LabelValue


def _values_rule(operator: str, values: tuple[str, ...], numeric: bool = False) -> None:
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"operator {operator} needs at least one of `values`")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"operator {operator} takes no `values`; remove them")
    if numeric and operator in ("Gt", "Lt"):
        if len(values) != 1 or not values[0].lstrip("-").isdigit():
            raise ValueError(f"operator {operator} needs exactly one integer in `values`")


class LabelRequirement(Section):
    """A label selector requirement (`matchExpressions` item)."""

    key: LabelKey = Field(..., description="Label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        ..., description="How the key's value is matched."
    )
    values: tuple[LabelValue, ...] = Field(
        (), description="Values for In/NotIn; none for Exists/DoesNotExist."
    )

    @model_validator(mode="after")
    def _rules(self) -> "LabelRequirement":
        _values_rule(self.operator, self.values)
        return self


class LabelSelector(Section):
    """A label selector (matchLabels and matchExpressions, all must match)."""

    match_labels: dict[LabelKey, LabelValue] = Field({}, description="Labels that must equal.")
    match_expressions: tuple[LabelRequirement, ...] = Field(
        (), description="Requirements that must all hold."
    )


class NodeRequirement(Section):
    """A node selector requirement (`matchExpressions`/`matchFields` item)."""

    key: LabelKey = Field(..., description="Node label key (or field, e.g. metadata.name).")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        ..., description="How the key's value is matched."
    )
    values: tuple[LabelValue, ...] = Field(
        (), description="Values for In/NotIn, one integer for Gt/Lt, none for Exists."
    )

    @model_validator(mode="after")
    def _rules(self) -> "NodeRequirement":
        _values_rule(self.operator, self.values, numeric=True)
        return self


class NodeSelectorTerm(Section):
    """One node selector term: its requirements all hold (terms are ORed)."""

    match_expressions: tuple[NodeRequirement, ...] = Field((), description="On node labels.")
    match_fields: tuple[NodeRequirement, ...] = Field((), description="On node fields.")

    @model_validator(mode="after")
    def _not_empty(self) -> "NodeSelectorTerm":
        if not self.match_expressions and not self.match_fields:
            raise ValueError("a node selector term needs matchExpressions or matchFields")
        return self


class NodeSelector(Section):
    """Required node affinity: a node must match one of the terms."""

    node_selector_terms: tuple[NodeSelectorTerm, ...] = Field(..., description="Terms, ORed.")

    @model_validator(mode="after")
    def _not_empty(self) -> "NodeSelector":
        # Here, not min_length: a bad term would be reported twice (item, then length).
        if not self.node_selector_terms:
            raise ValueError("nodeSelectorTerms needs at least one term")
        return self


class PreferredNode(Section):
    """A weighted node preference."""

    weight: int = Field(..., ge=1, le=100, description="Weight 1-100.")
    preference: NodeSelectorTerm = Field(..., description="The node selector term preferred.")


class NodeAffinity(Section):
    """Node affinity: which nodes the pods may (must, or prefer to) run on."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        None, description="Nodes the pods must run on."
    )
    preferred_during_scheduling_ignored_during_execution: tuple[PreferredNode, ...] = Field(
        (), description="Nodes the pods prefer."
    )


class PodAffinityTerm(Section):
    """Pods (by label) that must (or must not) run in the same topology domain."""

    label_selector: LabelSelector | None = Field(None, description="The pods this term is about.")
    topology_key: LabelKey = Field(
        ..., description="Node label that defines the domain, e.g. `kubernetes.io/hostname`."
    )
    namespaces: tuple[DnsLabel, ...] = Field(
        (), description="Namespaces of those pods. Default: the pod's own."
    )
    namespace_selector: LabelSelector | None = Field(
        None, description="Namespaces of those pods, by label."
    )
    match_label_keys: tuple[LabelKey, ...] = Field(
        (), description="Pod label keys whose values are ANDed into the selector."
    )


class WeightedPodAffinityTerm(Section):
    """A weighted pod (anti-)affinity preference."""

    weight: int = Field(..., ge=1, le=100, description="Weight 1-100.")
    pod_affinity_term: PodAffinityTerm = Field(..., description="The term preferred.")


class PodAffinity(Section):
    """Pod affinity or anti-affinity (anti-affinity spreads replicas over nodes)."""

    required_during_scheduling_ignored_during_execution: tuple[PodAffinityTerm, ...] = Field(
        (), description="Terms that must hold."
    )
    preferred_during_scheduling_ignored_during_execution: tuple[WeightedPodAffinityTerm, ...] = (
        Field((), description="Terms preferred.")
    )


class Affinity(Section):
    """Kubernetes affinity, as in a pod spec. With a per-role override the three parts merge
    (a role's `podAntiAffinity` keeps the section's `nodeAffinity`)."""

    node_affinity: NodeAffinity | None = Field(None, description="Node affinity.")
    pod_affinity: PodAffinity | None = Field(None, description="Pod affinity.")
    pod_anti_affinity: PodAffinity | None = Field(
        None, description="Pod anti-affinity, e.g. one replica per node."
    )


class TopologySpread(Section):
    """A topology spread constraint. Without `labelSelector` pdctl fills in the selector of
    the role's own pods (`app.kubernetes.io/instance` and `component`)."""

    max_skew: int = Field(..., ge=1, description="Largest allowed difference in pod counts.")
    topology_key: LabelKey = Field(..., description="Node label of the domains.")
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(
        "DoNotSchedule", description="What to do when the spread cannot hold."
    )
    label_selector: LabelSelector | None = Field(
        None, description="Pods counted. Default: this role's pods."
    )
    min_domains: int | None = Field(
        None, ge=1, description="Minimum eligible domains (DoNotSchedule only)."
    )
    node_affinity_policy: Literal["Honor", "Ignore"] | None = Field(
        None, description="Whether node affinity limits the domains."
    )
    node_taints_policy: Literal["Honor", "Ignore"] | None = Field(
        None, description="Whether taints limit the domains."
    )
    match_label_keys: tuple[LabelKey, ...] = Field(
        (), description="Pod label keys whose values are ANDed into the selector."
    )

    @model_validator(mode="after")
    def _rules(self) -> "TopologySpread":
        if self.min_domains is not None and self.when_unsatisfiable != "DoNotSchedule":
            raise ValueError("minDomains applies with whenUnsatisfiable DoNotSchedule only")
        return self
