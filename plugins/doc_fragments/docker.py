"""Documentation of the Docker connection options the bai.cluster modules share.

They are ``DOCKER_ARGUMENT_SPEC`` in plugins/module_utils/engine/common.py; a module whose
argument_spec includes it uses ``extends_documentation_fragment: [bai.cluster.docker]``,
which also names the Docker SDK it needs (``connect()``) in its requirements.
"""

from __future__ import annotations


class ModuleDocFragment:
    """The options of ``DOCKER_ARGUMENT_SPEC``, and the SDK behind them."""

    DOCUMENTATION = r"""
---
options:
  docker_host:
    description:
      - The engine to talk to, e.g. V(unix:///var/run/docker.sock).
      - Default is E(DOCKER_HOST) (with E(DOCKER_TLS_VERIFY), E(DOCKER_CERT_PATH)), else the
        local socket.
    type: str
  docker_timeout:
    description: Seconds to wait for one Docker API call.
    type: int
    default: 60
requirements:
  - docker SDK for Python 5.0 or later (Debian python3-docker works)
"""
