"""bai-cluster: a CLI and a small Python API over the project's playbooks.

Both run the same playbooks (``playbooks/session_*.yml``, ``playbooks/lab.yml``,
``site.yml``) through ansible-runner; see :mod:`bai_cli.api` for the API and
``bai-cluster --help`` for the CLI.
"""

from __future__ import annotations

__version__ = "0.1.0"
