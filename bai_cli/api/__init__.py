"""The Python API of bai-cluster: the CLI is a thin layer over these functions.

Each function runs one of the project's playbooks through ansible-runner
(:func:`bai_cli.runner.run_playbook`) and returns a dataclass, or raises
:class:`~bai_cli.errors.BaiClusterError` (``kind``, ``step``, ``task``, ``message``,
``exit_code``)::

    from bai_cli import api
    session = api.create_session("train", 3, resources={"cpu": 1, "mem": "1g"},
                                 inventory="inventories/local")
    print(session.session_id, [c.host for c in session.containers])
    api.destroy_session("train", inventory="inventories/local")

    rows, totals = api.list_agents(inventory="inventories/local")
    api.set_agent_availability("agent1", "pause", reason="driver upgrade")
    api.drain_agent("agent1", timeout_s=300)

``on_event`` (optional) receives every ansible-runner event as it happens; the CLI turns
them into progress lines with :mod:`bai_cli.progress`.

By noun: :mod:`.session` (and its records, :mod:`.session_model`), :mod:`.ledger` (the
scheduler pass, reconcile), :mod:`.shell` (commands run in a container), :mod:`.agent`,
:mod:`.lab` (lab and site), :mod:`.metrics`, :mod:`.queue`, :mod:`.apps` (a session's
interactive apps); :mod:`.base` runs the playbooks.
"""

from __future__ import annotations

from ..errors import BaiClusterError
from .agent import (
    AGENT_AVAILABILITY,
    AGENT_CHECK,
    AGENT_DRAIN,
    AGENT_LIST,
    AGENT_REMOVE,
    DRAIN_TIMEOUT_S,
    AgentAvailability,
    AgentHealth,
    Drained,
    Removed,
    check_agent,
    drain_agent,
    list_agents,
    remove_agent,
    set_agent_availability,
    show_agent,
)
from .apps import APP, App, Apps, open_app, session_apps
from .base import Event
from .lab import LAB, SITE, PlaybookSummary, lab, site
from .ledger import (
    RECONCILE,
    SCHEDULE,
    Reconciled,
    Scheduled,
    reconcile_sessions,
    schedule_sessions,
)
from .metrics import METRICS, Metrics, collect_metrics
from .queue import QUEUE, list_queue
from .session import (
    CREATE,
    DESTROY,
    ENV_NAMES,
    ENV_PREFIXES,
    LIST,
    LOGS,
    SHOW,
    SSH_PORT,
    WAIT,
    create_extravars,
    create_session,
    destroy_session,
    details_from_stats,
    list_sessions,
    parse_env,
    session_env,
    session_output,
    show_session,
    signal_session,
    wait_job,
)
from .session_model import (
    Access,
    Container,
    Destroyed,
    JobResult,
    Session,
    SessionDetails,
    SessionRow,
)
from .shell import ShellCommand, logs_command, shell_command

__all__ = [
    "AGENT_AVAILABILITY",
    "AGENT_CHECK",
    "AGENT_DRAIN",
    "AGENT_LIST",
    "AGENT_REMOVE",
    "APP",
    "CREATE",
    "DESTROY",
    "DRAIN_TIMEOUT_S",
    "ENV_NAMES",
    "ENV_PREFIXES",
    "LAB",
    "LIST",
    "LOGS",
    "METRICS",
    "QUEUE",
    "RECONCILE",
    "SCHEDULE",
    "SHOW",
    "SITE",
    "SSH_PORT",
    "WAIT",
    "Access",
    "AgentAvailability",
    "AgentHealth",
    "App",
    "Apps",
    "BaiClusterError",
    "Container",
    "Destroyed",
    "Drained",
    "Event",
    "JobResult",
    "Metrics",
    "PlaybookSummary",
    "Reconciled",
    "Removed",
    "Scheduled",
    "Session",
    "SessionDetails",
    "SessionRow",
    "ShellCommand",
    "check_agent",
    "collect_metrics",
    "create_extravars",
    "create_session",
    "destroy_session",
    "details_from_stats",
    "drain_agent",
    "lab",
    "list_agents",
    "list_queue",
    "list_sessions",
    "logs_command",
    "open_app",
    "parse_env",
    "reconcile_sessions",
    "remove_agent",
    "schedule_sessions",
    "session_apps",
    "session_env",
    "session_output",
    "set_agent_availability",
    "shell_command",
    "show_agent",
    "show_session",
    "signal_session",
    "site",
    "wait_job",
]
