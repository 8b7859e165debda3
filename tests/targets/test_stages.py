"""Stage detection from engine log lines and pod state (pdctl/targets/stages.py), on the log
excerpt in tests/fixtures/vllm/ and pod/event dicts as the API server writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdctl.targets.kube.status import pod_reason
from pdctl.targets.stages import latest_line, pod_stage, stage_of

LOG = (Path(__file__).resolve().parents[1] / "fixtures/vllm/startup-docker.log").read_bytes()
LOG = LOG.decode()


def upto(marker: str) -> str:
    """The log up to and including the first line containing `marker`."""
    lines = LOG.split("\n")  # a progress bar's \r stays inside its line
    i = next(n for n, line in enumerate(lines) if marker in line)
    return "\n".join(lines[: i + 1]) + "\n"


@pytest.mark.parametrize(
    ("marker", "stage"),
    [
        ("Unable to find image", "pulling image"),
        ("Pull complete", "pulling image"),
        ("Status: Downloaded newer image", "pulling image"),
        ("vLLM API server version", "pulling image"),  # nothing newer tells a stage yet
        ("Starting to load model", "loading weights"),
        ("Fetching 4 files", "downloading weights"),
        ("50% Completed", "loading weights"),
        ("Model loading took", "loading weights"),
        ("Dynamo bytecode transform", "compiling"),
        ("torch.compile takes", "compiling"),
        ("Capturing CUDA graphs", "capturing graphs"),
        ("Graph capturing finished", "starting server"),
        ("Starting vLLM API server", "starting server"),
        ("Application startup complete", "serving"),
        ("GET /v1/models", "serving"),
    ],
)
def test_stage_of_each_step_of_a_real_start(marker, stage):
    assert stage_of(upto(marker)) == stage


def test_nothing_known_yet_is_starting():
    assert stage_of("") == "starting"
    assert stage_of("some wrapper line\n") == "starting"


def test_latest_line_skips_probes_and_vllm_prefix_and_shows_the_last_progress_frame():
    assert latest_line(LOG) == "INFO:     Application startup complete."
    assert latest_line(upto("Model loading took")) == (
        "Model loading took 14.9889 GiB and 7.512 seconds"
    )
    fetching = latest_line(upto("Fetching 4 files"))
    assert fetching.startswith("Fetching 4 files:  25%") and "\r" not in fetching
    assert latest_line("\x1b[32mINFO\x1b[0m ready\n") == "INFO ready"
    assert len(latest_line("x" * 500)) == 160


def pod(name: str, **status: object) -> dict:
    return {"metadata": {"name": name}, "status": status}


SCHEDULED = {"type": "PodScheduled", "status": "True"}
NOT_READY = {"type": "Ready", "status": "False"}
UNSCHEDULABLE = pod("p-0", phase="Pending", conditions=[{
    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
    "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: "
    "0/4 nodes are available: 4 No preemption victims found for incoming pod.",
}])
PULLING = pod(
    "p-1", phase="Pending", conditions=[SCHEDULED],
    containerStatuses=[{"name": "vllm", "state": {"waiting": {"reason": "ContainerCreating"}}}],
)
PULL_EVENT = {
    "involvedObject": {"kind": "Pod", "name": "p-1"}, "reason": "Pulling", "type": "Normal",
    "message": 'Pulling image "vllm/vllm-openai:v0.11.0"', "lastTimestamp": "2026-12-01T09:00:00Z",
}
BACKOFF = pod("p-2", phase="Pending", conditions=[SCHEDULED], containerStatuses=[{
    "name": "vllm", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "vllm/vllm-openai:v9"',
    }},
}])
CRASHING = pod("p-3", phase="Running", conditions=[SCHEDULED, NOT_READY], containerStatuses=[{
    "name": "vllm", "restartCount": 4,
    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s"}},
    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
}])
LOADING = pod(
    "p-4", phase="Running", conditions=[SCHEDULED, NOT_READY],
    containerStatuses=[{"name": "vllm", "state": {"running": {"startedAt": "t"}}}],
)


def test_pod_stage():
    assert pod_stage(UNSCHEDULABLE, []) == "scheduling"
    assert pod_stage(PULLING, [PULL_EVENT]) == "pulling image"
    assert pod_stage(PULLING, []) == "creating"
    assert pod_stage(BACKOFF, []) == "failing"
    assert pod_stage(CRASHING, []) == "failing"
    assert pod_stage(LOADING, []) == "starting"
    ready = pod("p-5", conditions=[SCHEDULED, {"type": "Ready", "status": "True"}])
    assert pod_stage(ready, []) == "healthy"


def test_pod_reason_one_line_each():
    def no_log(_c: str) -> str:
        return ""

    assert pod_reason(UNSCHEDULABLE, [], no_log).startswith(
        "Pending: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    )
    assert pod_reason(BACKOFF, [], no_log) == (
        'ImagePullBackOff: Back-off pulling image "vllm/vllm-openai:v9"'
    )
    crash = pod_reason(CRASHING, [], lambda c: f"{c}: OSError: model not found")
    assert crash == (
        "CrashLoopBackOff: vllm restarted 4 times, last exit code 1; "
        "its log ends: vllm: OSError: model not found"
    )
    warn = dict(PULL_EVENT, type="Warning", reason="FailedMount", message="MountVolume failed")
    assert pod_reason(dict(PULLING, metadata={"name": "p-1"}), [warn], no_log) == (
        "FailedMount: MountVolume failed"
    )
