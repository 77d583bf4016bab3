"""A session's interactive apps (docs/apps.md): list them, or open one through the app
proxy (playbooks/session_app.yml).

    apps = api.session_apps("train", inventory="inventories/lab")
    opened = api.open_app("train", "jupyter")
    print(opened.url)        # https://APPPROXY:PORT/lab?bai_token=...: a credential

The link carries the route's secret: whoever holds it gets into the app, until the
session is destroyed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .base import Event, run, set_var

APP = "playbooks/session_app.yml"


@dataclass(frozen=True)
class App:
    """One app of a session: in main1 (``port``), where its agent publishes it, whether
    something listens on it (``state``: running, idle, or started by this call), and,
    once opened, its route's port on the app proxy and its link (``url``, a credential)."""

    name: str
    protocol: str
    port: int
    declared: bool
    host_port: int | None
    state: str
    proxy_port: int | None = None
    url: str | None = field(default=None, repr=False)  # a credential

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> App:
        host_port = data.get("host_port")
        proxy_port = data.get("proxy_port")
        return cls(
            name=str(data.get("name") or ""),
            protocol=str(data.get("protocol") or "http"),
            port=int(data.get("port") or 0),
            declared=bool(data.get("declared")),
            host_port=int(host_port) if host_port else None,
            state=str(data.get("state") or ""),
            proxy_port=int(proxy_port) if proxy_port else None,
            url=str(data["url"]) if data.get("url") else None,
        )


@dataclass(frozen=True)
class Apps:
    """What ``session app`` found: the session's apps, and the one it opened (with its
    link, ``url``, and the app proxy's port of its route)."""

    session: str
    agent: str
    apps: tuple[App, ...] = ()
    app: App | None = None
    started: bool = False
    url: str | None = field(default=None, repr=False)  # a credential
    proxy_port: int | None = None

    @classmethod
    def from_stats(cls, data: Mapping[str, Any]) -> Apps:
        app = data.get("app")
        port = data.get("proxy_port")
        return cls(
            session=str(data.get("session") or ""),
            agent=str(data.get("agent") or ""),
            apps=tuple(App.from_dict(a) for a in data.get("apps") or ()),
            app=App.from_dict(app) if app else None,
            started=bool(data.get("started")),
            url=str(data["url"]) if data.get("url") else None,
            proxy_port=int(port) if port else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "agent": self.agent,
            "apps": [vars(a) for a in self.apps],
            "app": vars(self.app) if self.app else None,
            "started": self.started,
            "url": self.url,
            "proxy_port": self.proxy_port,
        }


def open_app(
    name: str,
    app: str | None = None,
    *,
    owner: str | None = None,
    start_timeout_s: int | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Apps:
    """Open ``app`` of session ``name`` (start it in main1 if it does not run, route the
    app proxy to it) and return its link; without ``app``, list the session's apps.
    ``owner``: only a session of that owner's."""
    extravars: dict[str, Any] = {"session_name": name}
    set_var(extravars, "app_name", app)
    set_var(extravars, "app_start_timeout_s", start_timeout_s)
    set_var(extravars, "session_owner_only", owner)
    result = run(APP, extravars, inventory=inventory, on_event=on_event, **kwargs)
    return Apps.from_stats(result.stats.get("bai_session_app") or {"session": name})


def session_apps(name: str, **kwargs: Any) -> Apps:
    """The session's apps (no change)."""
    return open_app(name, None, **kwargs)
