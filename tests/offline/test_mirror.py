"""`kubernetes.imageMirror`: every image of the rendered objects (containers, init containers,
image volumes) pulled from the mirror, path and tag kept; the objects still pass strict
validation; `pdctl bundle` lists the images the spec names, not the mirrored ones."""

from __future__ import annotations

import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from pdctl.offline.images import refs
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.render.mirror import images, mirrored
from pdctl.spec import load_text
from tests.conftest import EXAMPLES, K8S_VERSION, check_scripts
from tests.helpers import pdctl
from tests.render.check import check_inference_pool, crd_schema

MIRROR = "registry.internal:5000"
KUBE = [p for p in EXAMPLES if "kubernetes:\n" in p.read_text() and "hosts:" not in p.read_text()]
IMAGE_VOLUME = """
name: w
phase: 1
model: {name: /models/qwen3}
kubernetes: {storage: {type: image, reference: r.example/weights/qwen3:1}}
serve: {replicas: 1, tensorParallel: 1}
"""


def objects(text: str, mirror: str | None) -> tuple[dict, ...]:
    spec, _ = load_text(text, "spec.yaml")
    plan = make_plan(spec)
    if mirror:
        k8s = spec.kubernetes.model_copy(update={"image_mirror": mirror})
        plan = make_plan(spec.model_copy(update={"kubernetes": k8s}))
    return render(plan).objects


@pytest.mark.parametrize("example", KUBE, ids=lambda p: p.stem)
def test_every_image_moves_to_the_mirror_and_the_objects_stay_valid(example: Path):
    text = example.read_text()
    before, after = objects(text, None), objects(text, MIRROR)
    assert images(after) == tuple(sorted(mirrored(r, MIRROR) for r in images(before)))
    assert images(before) and all(r.startswith(f"{MIRROR}/") for r in images(after))
    assert "vllm/vllm-openai" in str(images(before)) and MIRROR not in str(images(before))
    for doc in after:
        if doc["kind"] == "InferencePool":
            check_inference_pool(doc)
        elif doc["kind"] == "LeaderWorkerSet":
            jsonschema.validate(doc, crd_schema("LeaderWorkerSet", doc["apiVersion"][-2:]))
        elif "/" not in doc["apiVersion"] or doc["apiVersion"].startswith(("apps/", "batch/")):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    plan = make_plan(load_text(text, "x.yaml")[0])
    assert refs(plan) == images(before)  # bundle lists the spec's images, not the mirror's


def test_an_image_volume_moves_too_and_docker_hub_names_keep_their_path():
    after = objects(IMAGE_VOLUME, "localhost:5000")
    assert set(images(after)) == {"localhost:5000/weights/qwen3:1",
                                  "localhost:5000/vllm/vllm-openai:v0.33.0"}
    for doc in after:
        kubernetes_validate.validate(doc, "1.31.0", strict=True)


def test_a_mirror_that_docker_would_read_as_a_user_is_refused(tmp_path: Path):
    overlay = tmp_path / "o.yaml"
    overlay.write_text("kubernetes: {imageMirror: mirror}\n")
    got = pdctl("render", "examples/phase1-k8s.yaml", "--overlay", str(overlay))
    assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert "o.yaml:1: kubernetes.imageMirror: 'mirror' is not a registry host" in got.stderr


def test_the_mirror_script_without_the_images_tags_them_from_the_engine(tmp_path: Path):
    """No --images (and no Docker engine): each image listed by tag with why it has no
    digest; mirror.sh tags by reference, needs a mirror, and passes shellcheck."""
    out = tmp_path / "b"
    made = pdctl("bundle", "examples/phase2-llmd.yaml", "-o", str(out),
                 env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert made.returncode == 0 and "images listed: 3" in made.stdout, made.stderr
    assert "no digests: cannot reach the local Docker engine" in made.stderr, made.stderr
    listed = (out / "images" / "images.txt").read_text().splitlines()[2:]
    assert listed[-1] == "vllm/vllm-openai:v0.33.0  # no digest: no local Docker engine"
    script = (out / "images" / "mirror.sh").read_text()
    assert ('docker tag ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0 '
            '"$mirror"/llm-d/llm-d-router-endpoint-picker:v0.10.0') in script, script
    check_scripts({"mirror.sh": script}, tmp_path)
    usage = subprocess.run(["sh", str(out / "images" / "mirror.sh")], capture_output=True,
                           text=True)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: sh mirror.sh HOST[:PORT]")


def test_up_with_a_bundle_refuses_a_kubernetes_spec(tmp_path: Path):
    got = pdctl("up", "examples/phase1-k8s.yaml", "--bundle", str(tmp_path), "--dry-run")
    assert got.returncode == 2 and "a Kubernetes cluster pulls its images" in got.stderr, got
