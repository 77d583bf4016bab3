"""The interactive apps' metrics (docs/metrics.md, docs/apps.md): what each app proxy host
holds - its open app routes, by app, and the app starts and failed starts that
``session app`` counted there - from the app proxies' bai_appproxy_apps reads. Pure.

    families(proxies) -> [Family]     proxies: {app proxy host: its read, or None}

Labels: ``appproxy`` (an inventory host of group appproxy), ``app`` (the app's name:
an image's apps, or a session's own declared ports, a-z, 0-9 and '-'; bounded by the
apps in use, never by a session's name) and ``result`` (started, failed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.metrics.exposition import (
    COUNTER,
    GAUGE,
    Family,
)
from ansible_collections.bai.cluster.plugins.module_utils.network.appproxy_apps import EVENTS

PREFIX = "bai_"


def families(proxies: Mapping[str, Optional[Mapping[str, Any]]]) -> list[Family]:
    """Every app family, in a fixed order. A proxy whose read failed (None, or no
    ``routes``) counts as down (bai_appproxy_up 0) and adds nothing else."""
    up = Family(PREFIX + "appproxy_up", GAUGE, "1 when the app proxy's app routes could be read")
    routes = Family(
        PREFIX + "app_routes",
        GAUGE,
        "Open app routes (one per session and app) by app proxy and app",
    )
    starts = Family(
        PREFIX + "app_starts",
        COUNTER,
        "Apps started in main1 by session app, by app proxy, app and result (started, failed)",
    )
    for host in sorted(proxies):
        read = proxies[host]
        if not isinstance(read, Mapping) or not isinstance(read.get("routes"), list):
            up.add({"appproxy": host}, 0)
            continue
        up.add({"appproxy": host}, 1)
        per_app: dict[str, int] = {}
        for route in read["routes"]:
            app = str(route.get("app") or "")
            per_app[app] = per_app.get(app, 0) + 1
        for app, n in sorted(per_app.items()):
            routes.add({"appproxy": host, "app": app}, n)
        found = read.get("counts")
        counts: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        for app in sorted(counts):
            row = counts[app] if isinstance(counts[app], Mapping) else {}
            for event in EVENTS:
                value = int(row.get(event) or 0)
                starts.add({"appproxy": host, "app": app, "result": event}, value)
    return [f for f in (up, routes, starts) if f.samples]
