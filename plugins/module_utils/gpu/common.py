"""What the GPU files share: the vendor and status names and the error type.

gpu_facts.py (detection), gpu_alloc.py (which devices a container gets) and
gpu_docker.py (what Docker is given for them) all use these. They live in their own file
so that gpu_alloc, which placement and admission import on the controller, does not
import gpu_facts and its tool parsers.
"""

from __future__ import annotations

VENDOR_NONE = "none"
VENDOR_NVIDIA = "nvidia"
VENDOR_AMD = "amd"
# status of the facts: "ok" (devices usable or no accelerator at all), or why not.
STATUS_OK = "ok"
STATUS_DRIVER_MISSING = "driver_missing"
STATUS_DRIVER_FAILED = "driver_failed"
