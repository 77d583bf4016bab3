# Copyright: the bai.cluster authors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What this collection's callbacks share: each works on the playbook run (the payload
cache, the in-process imports, the vars files cache), prints nothing of its own beside the
stdout callback, and runs only where callbacks_enabled names it."""

from __future__ import annotations

from ansible.plugins.callback import CallbackBase


class RunCallback(CallbackBase):
    """An aggregate callback that must be enabled; a subclass names itself (CALLBACK_NAME)."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NEEDS_ENABLED = True
