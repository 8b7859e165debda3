"""The Kubernetes Pod Security Standards' "baseline" profile (v1.29 and later) as a pure check
of a pod spec, plus pdctl's own posture on top of it (hardened containers, API tokens only
where a process calls the API). Each returns the list of violations; empty means it passes."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

# https://kubernetes.io/docs/concepts/security/pod-security-standards/ (baseline)
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
        "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
APPARMOR_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def all_containers(pod: Obj) -> list[Obj]:
    return [
        *pod.get("initContainers", []), *pod.get("containers", []),
        *pod.get("ephemeralContainers", []),
    ]


def _context_violations(where: str, ctx: Obj) -> list[str]:
    out = []
    if (ctx.get("windowsOptions") or {}).get("hostProcess"):
        out.append(f"{where}: windowsOptions.hostProcess")
    se = ctx.get("seLinuxOptions") or {}
    if se.get("type", "") not in SELINUX_TYPES:
        out.append(f"{where}: seLinuxOptions.type {se['type']}")
    for key in ("user", "role"):
        if se.get(key):
            out.append(f"{where}: seLinuxOptions.{key}")
    if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append(f"{where}: seccompProfile Unconfined")
    if (ctx.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.append(f"{where}: appArmorProfile Unconfined")
    return out


def baseline_violations(pod: Obj, annotations: Obj | None = None) -> list[str]:
    """Every baseline rule: host namespaces, HostProcess, privileged, capabilities, hostPath,
    host ports, AppArmor, SELinux, /proc mount, seccomp, sysctls."""
    out = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            out.append(f"pod: {field}")
    ctx = pod.get("securityContext") or {}
    out += _context_violations("pod", ctx)
    for sysctl in ctx.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            out.append(f"pod: sysctl {sysctl['name']}")
    for vol in pod.get("volumes", []):
        if "hostPath" in vol:
            out.append(f"volume {vol['name']}: hostPath")
    for name, value in (annotations or {}).items():
        if name.startswith(APPARMOR_PREFIX) and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            out.append(f"annotation {name}: {value}")
    for c in all_containers(pod):
        where = f"container {c['name']}"
        cctx = c.get("securityContext") or {}
        out += _context_violations(where, cctx)
        if cctx.get("privileged"):
            out.append(f"{where}: privileged")
        for cap in (cctx.get("capabilities") or {}).get("add", []):
            if cap not in BASELINE_CAPABILITIES:
                out.append(f"{where}: capability {cap}")
        if cctx.get("procMount", "Default") != "Default":
            out.append(f"{where}: procMount {cctx['procMount']}")
        for port in c.get("ports", []):
            if port.get("hostPort"):
                out.append(f"{where}: hostPort {port['hostPort']}")
    return out


def hardening_violations(pod: Obj) -> list[str]:
    """pdctl's posture: every container drops every capability and escalation and runs under
    the runtime's seccomp filter; a pod mounts an API token only where it names a dedicated
    ServiceAccount (the EPP's pod; the decode pod's sidecar alone, via a projected volume)."""
    out = []
    for c in all_containers(pod):
        where = f"container {c['name']}"
        ctx = c.get("securityContext") or {}
        if ctx.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}: allowPrivilegeEscalation not false")
        if (ctx.get("capabilities") or {}).get("drop") != ["ALL"]:
            out.append(f"{where}: capabilities not dropped")
        if (ctx.get("capabilities") or {}).get("add"):
            out.append(f"{where}: capabilities added")
        if (ctx.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            out.append(f"{where}: seccompProfile not RuntimeDefault")
    automount = pod.get("automountServiceAccountToken")
    if automount is None:
        out.append("pod: automountServiceAccountToken unset (defaults to a mounted token)")
    elif automount and not pod.get("serviceAccountName"):
        out.append("pod: the default ServiceAccount's token is mounted")
    projected = {
        v["name"]
        for v in pod.get("volumes", [])
        if any("serviceAccountToken" in s for s in (v.get("projected") or {}).get("sources", []))
    }
    for c in all_containers(pod):
        for mount in c.get("volumeMounts", []):
            if mount["name"] in projected and not pod.get("serviceAccountName"):
                out.append(f"container {c['name']}: a token of the default ServiceAccount")
    return out


def pod_templates(docs: list[Obj]) -> list[tuple[str, Obj, Obj]]:
    """(name, pod spec, pod annotations) of every workload object that holds a pod template."""
    out = []
    for doc in docs:
        spec = doc.get("spec") or {}
        if doc["kind"] == "Pod":
            out.append((doc["metadata"]["name"], spec, doc["metadata"].get("annotations", {})))
        elif "template" in spec:
            tpl = spec["template"]
            meta = tpl.get("metadata", {})
            out.append((doc["metadata"]["name"], tpl["spec"], meta.get("annotations", {})))
    return out
