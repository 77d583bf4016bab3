"""Make plugins/module_utils importable as top-level modules (``import bai_cluster``).

Ansible imports the same files as ``ansible.module_utils.<name>``; the unit tests need
neither Ansible nor Docker, so they import them directly.
"""

import sys
from pathlib import Path

MODULE_UTILS = Path(__file__).resolve().parents[2] / "plugins" / "module_utils"
if str(MODULE_UTILS) not in sys.path:
    sys.path.insert(0, str(MODULE_UTILS))
