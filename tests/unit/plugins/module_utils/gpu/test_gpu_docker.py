"""GPU containers: the Docker options and environment for a container's GPU devices.

SIMULATED: no machine that runs these tests has a GPU; the agents' facts come from a
recorded nvidia-smi output and a simulated AMD host (gpu_fakes.py). What is real: the
device requests, CDI names, AMD device nodes and groups, and the environment.
"""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import GpuError
from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import detect, gpu_facts
from ansible_collections.bai.cluster.plugins.module_utils.gpu.options import (
    docker_gpu_options,
    gpu_env,
)
from gpu_fakes import H100, amd_host, fixture


# --- handing devices to Docker, environment --------------------------------------------------
def test_docker_options_for_nvidia_device_requests_and_cdi():
    facts = gpu_facts("nvidia", H100)
    assert docker_gpu_options(facts, [3, 2]) == {
        "device_requests": [
            {"driver": "nvidia", "device_ids": ["2", "3"], "capabilities": [["gpu"]]}
        ]
    }
    assert docker_gpu_options(facts, [0], method="cdi") == {
        "device_requests": [{"driver": "cdi", "device_ids": ["nvidia.com/gpu=0"]}]
    }
    assert docker_gpu_options(facts, []) == {}
    with pytest.raises(GpuError, match="not among"):
        docker_gpu_options(facts, [8])
    with pytest.raises(GpuError, match="method"):
        docker_gpu_options(facts, [0], method="runtime")


def test_docker_options_for_amd_pass_kfd_the_render_nodes_and_the_groups():
    facts = detect(amd_host(4, tools={"rocm-smi": (0, fixture("rocm-smi_mi300x8.json"), "")}))
    assert docker_gpu_options(facts, [1, 2]) == {
        "devices": [
            "/dev/kfd:/dev/kfd:rwm",
            "/dev/dri/renderD129:/dev/dri/renderD129:rwm",
            "/dev/dri/renderD130:/dev/dri/renderD130:rwm",
        ],
        "group_add": ["993", "44"],
    }


def test_docker_options_need_an_accelerator():
    with pytest.raises(GpuError, match="not among"):
        docker_gpu_options(gpu_facts("none"), [0])


def test_gpu_env():
    assert gpu_env("nvidia", 2) == {"GPU_COUNT": "2", "N_GPUS": "2"}
    assert gpu_env("nvidia", 0) == {
        "GPU_COUNT": "0",
        "N_GPUS": "0",
        "NVIDIA_VISIBLE_DEVICES": "void",
    }
    assert gpu_env("none", 0) == {"GPU_COUNT": "0", "N_GPUS": "0"}
