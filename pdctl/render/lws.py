"""Multi-node instances on Kubernetes: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) per
group of pods, the shape llm-d's wide-EP guide uses, and a Service that selects only the
leaders (the pods with an API server). Phase 2 (llm-d): a prefill or decode role that spans
nodes is a LeaderWorkerSet whose leader template is the role's llm-d pod (decode: the routing
sidecar in front of vLLM, the InferencePool's labels) and whose workers are headless engines
without pool labels, so the InferencePool selects the leaders only.

Every pod of a group runs `vllm serve` through the plan's `launch` shell, which adds the
per-pod flags from the variables LWS injects into every container: LWS_LEADER_ADDRESS (the
leader pod's DNS name) and LWS_WORKER_INDEX (0 for the leader). `restartPolicy:
RecreateGroupOnPodRestart`: a failed pod restarts its whole group, as vLLM's nodes cannot
rejoin a running group.
"""

from __future__ import annotations

import copy

from pdctl.plan.model import Instance, Plan
from pdctl.render.kube import Obj, common_objects, http_service, metadata, pod_metadata, port
from pdctl.render.kube_pod import engine_container, gpu_request, pod_spec

API_VERSION = "leaderworkerset.x-k8s.io/v1"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
WORKER_LABEL = "pdctl.io/group-worker"  # a phase 2 group's worker pods (no pool labels)


def group_container(plan: Plan, inst: Instance, number: int = 8000) -> Obj:
    """The engine container of a group's pod: the leader keeps its port and /health probes;
    a worker (`--headless`) serves no HTTP, so it has neither."""
    container = engine_container(plan, inst, gpu_request(inst.gpu_count), number)
    container["command"] = list(inst.launch)
    if inst.leader:
        for key in ("ports", "startupProbe", "readinessProbe", "livenessProbe"):
            container.pop(key, None)
    return container


def lws_obj(plan: Plan, leader: Instance, component: str, number: int = 8000) -> Obj:
    (worker,) = leader.workers
    templates = {}
    for key, inst in (("leaderTemplate", leader), ("workerTemplate", worker)):
        pod = pod_spec(plan, [group_container(plan, inst, number)], inst.tensor_parallel, component)
        templates[key] = {"metadata": pod_metadata(plan, component, {}, {}), "spec": pod}
    return lws(plan, leader, component, templates["leaderTemplate"], templates["workerTemplate"])


def lws(plan: Plan, leader: Instance, component: str, leader_tpl: Obj, worker_tpl: Obj) -> Obj:
    """A LeaderWorkerSet of `leader.replicas` groups, each the leader and its workers."""
    (worker,) = leader.workers
    return {
        "apiVersion": API_VERSION, "kind": "LeaderWorkerSet",
        "metadata": metadata(plan, leader.name, component),
        "spec": {
            "replicas": leader.replicas,
            # Workers start with the leader: vLLM's nodes wait for each other (rendezvous).
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": 1 + worker.replicas, "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader_tpl, "workerTemplate": worker_tpl,
            },
        },
    }


def phase1_group(plan: Plan) -> list[Obj]:
    """Phase 1 for an instance that spans nodes: a Service in front of the groups' leaders
    only (worker index 0) and the LeaderWorkerSet."""
    (inst,) = plan.instances
    svc = http_service(plan, plan.name, "serve", 8000)
    svc["spec"]["selector"][WORKER_INDEX] = "0"
    return [*common_objects(plan), svc, lws_obj(plan, inst, "serve")]


def group_lws(plan: Plan, leader: Instance, template: Obj, component: str) -> Obj:
    """A phase 2 role's LeaderWorkerSet: `template` is the role's llm-d pod template (from its
    Deployment in render/pd_kube.py), which becomes the leader's with the group launch; the
    workers run the headless engine alone with the role's scheduling and no pool labels."""
    (worker,) = leader.workers
    leader_tpl = copy.deepcopy(template)
    (engine,) = [c for c in leader_tpl["spec"]["containers"] if c["name"] == "vllm"]
    engine["command"] = list(leader.launch)
    container = group_container(plan, worker, leader.port)
    container["env"] = copy.deepcopy(engine["env"])  # with the pod-IP side-channel host
    container["ports"] = [port(name, number) for name, number in worker.extra_ports]
    pod = pod_spec(plan, [container], worker.tensor_parallel, component)
    labels = {WORKER_LABEL: plan.name}
    worker_tpl = {"metadata": pod_metadata(plan, component, labels, {}), "spec": pod}
    return lws(plan, leader, component, leader_tpl, worker_tpl)
