"""What an app proxy host knows of the sessions' apps (plugins/modules/bai_appproxy_apps.py;
docs/apps.md): its app routes, read from the route files' headers without their secrets
(or, for one session, with their links), and the count of app starts and failed starts
that ``session app`` told it of, for ``bai-cluster metrics``.

The counts live beside the routes, in ``<routes_dir>/.app-starts.json`` (HAProxy reads
only ``*.cfg`` there), written under the routes' lock: one small JSON object, ``{app:
{started: N, failed: N}}``, whose keys are bounded by the app names in use. They are
counters: they only grow, and a new app proxy host starts from zero.

Pure: no Ansible imports, no I/O, valid Python 3.9+.

    route_views(routes, session=None)     the app routes, without their secrets
    read_counts(text)                     the counts file's text -> {app: {event: n}}
    record(counts, app, event)            the counts with one more ``event`` for ``app``
    render_counts(counts)                 the counts file's text
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session.apps import check_app_name

COUNTS_FILE = ".app-starts.json"
# What session app tells the proxy: the app started, or its start failed (it ended, or
# did not listen in time).
EVENTS = ("started", "failed")
# What a route view keeps of a route file's header (never its secret).
_VIEW_KEYS = ("session", "session_id", "app", "port", "backend_host", "backend_port")


def route_views(
    routes: Mapping[str, Mapping[str, Any]], session: Optional[str] = None
) -> list[dict[str, Any]]:
    """The app routes among ``routes`` (file stem -> header, as Proxy.routes reads them),
    sorted by session and app, each without its secret; with ``session``, that
    session's only. SSH routes (no app) are left out."""
    views = []
    for header in routes.values():
        if not header.get("app") or (session is not None and header.get("session") != session):
            continue
        views.append({key: header[key] for key in _VIEW_KEYS if key in header})
    return sorted(views, key=lambda v: (str(v.get("session")), str(v.get("app"))))


def read_counts(text: Optional[str]) -> dict[str, dict[str, int]]:
    """The counts file's text as {app: {started: n, failed: n}}; a missing or damaged
    file (or entry) counts as zero, never as an error: metrics must not fail an open."""
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    counts: dict[str, dict[str, int]] = {}
    if not isinstance(data, dict):
        return counts
    for app, row in data.items():
        try:
            check_app_name(app)
        except SpecError:
            continue
        row = row if isinstance(row, dict) else {}
        counts[app] = {event: _count(row.get(event)) for event in EVENTS}
    return counts


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def record(counts: Mapping[str, Mapping[str, int]], app: str, event: str) -> dict[str, Any]:
    """``counts`` with one more ``event`` (started or failed) for ``app``."""
    check_app_name(app)
    if event not in EVENTS:
        raise SpecError(f"event {event!r}: one of {', '.join(EVENTS)}")
    out = {name: dict(row) for name, row in counts.items()}
    row = out.setdefault(app, {e: 0 for e in EVENTS})
    row[event] = row.get(event, 0) + 1
    return out


def render_counts(counts: Mapping[str, Mapping[str, int]]) -> str:
    return json.dumps(counts, sort_keys=True) + "\n"
