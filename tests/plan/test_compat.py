"""The compatibility table's PD facts: connectors, KV keys, CUDA major, wheels, pins."""

from __future__ import annotations

import pytest

from pdctl.compat import LLMD, ROUTER_VERSION, release
from pdctl.errors import SpecError
from pdctl.spec.pd import Router


@pytest.mark.parametrize(
    ("version", "cuda", "driver", "mooncake"),
    [
        ("0.19.0", 12, "575.51.03", "mooncake-transfer-engine=="),
        ("0.20.0", 13, "580.65.06", "mooncake-transfer-engine-cuda13=="),
        ("0.23.0", 13, "580.65.06", "mooncake-transfer-engine-cuda13=="),
        ("0.33.0", 13, "580.65.06", "mooncake-transfer-engine-cuda13=="),
    ],
)
def test_cuda_major_driver_and_mooncake_wheel(version, cuda, driver, mooncake) -> None:
    rel = release(version)
    assert (rel.cuda_major, rel.min_driver) == (cuda, driver)
    assert rel.mooncake_pip().startswith(mooncake)
    assert rel.mooncake_pip("cpu").startswith("mooncake-transfer-engine-non-cuda==")


def test_p2p_nccl_and_its_keys_end_at_0_23() -> None:
    old, new = release("0.23.0"), release("0.24.0")
    assert "P2pNcclConnector" in old.connectors and "P2pNcclConnector" not in new.connectors
    for key in ("kv_buffer_size", "kv_rank", "kv_parallel_size", "kv_ip"):
        assert old.has_kv_key(key) and not new.has_kv_key(key)
    with pytest.raises(SpecError) as err:
        new.require_connector("P2pNcclConnector")
    assert err.value.line() == (
        "disaggregation.connector: P2pNcclConnector was removed in vLLM 0.24.0; "
        "pin engine.version <= 0.23.0 or use connector nixl or mooncake"
    )
    for rel in (old, new):
        for name in ("NixlConnector", "MooncakeConnector", "MooncakeStoreConnector",
                     "MultiConnector"):
            rel.require_connector(name)


def test_pins_live_in_one_place() -> None:
    assert Router().version == ROUTER_VERSION
    assert LLMD.sidecar_image.rsplit(":", 1)[1].startswith("v")
    assert LLMD.epp_image.rsplit(":", 1)[1].startswith("v")
    assert LLMD.pool_api == "inference.networking.k8s.io/v1"
