"""What a reconcile says of the repairs (playbooks/session_reconcile.yml, the filter
``bai.cluster.bai_repair_outcome``): per session of the ledger's ``stopped`` rows, over
every agent's registered bai_session_repair result, whether it was started again and its
mesh checked, or why not.

Controller-side and apart from module_utils/containers/repair.py, which the agents run:
a filter plugin that imported that (and with it the Docker SDK) would make every playbook
run that loads the session filters slower.

    outcome(stopped, recheck, started, checked)   {restarted, restart_failed}
    signal_outcome(rows, sent)                    {end_signals, end_signal_failed}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def signal_outcome(rows: Sequence[Mapping[str, Any]], sent: Mapping[str, Any]) -> dict[str, Any]:
    """The end signals a reconcile sent (the ledger's ``end_signals`` rows, one per agent of
    a session), from each agent's registered bai_session_signal loop (agent -> result;
    None where the play did not run there): ``end_signals`` (session -> signal, sent on
    every agent) and ``end_signal_failed`` (session -> what went wrong)."""
    errors: dict[str, list[str]] = {str(r["session"]): [] for r in rows}
    signals = {str(r["session"]): str(r["signal"]) for r in rows}
    for row in rows:
        name, agent = str(row["session"]), str(row["agent"])
        said = _signal_error(sent.get(agent), name)
        if said:
            errors[name].append(f"{agent}: {said}")
    return {
        "end_signals": {n: signals[n] for n, e in sorted(errors.items()) if not e},
        "end_signal_failed": {n: "; ".join(e) for n, e in sorted(errors.items()) if e},
    }


def _signal_error(result: Any, session: str) -> str:
    if not result:
        return "the signal was not sent there"
    if result.get("unreachable"):
        return str(result.get("msg") or "unreachable")
    for one in result.get("results") or ():
        if (one.get("item") or {}).get("session") != session:
            continue
        if one.get("failed") or one.get("unreachable"):
            return str(one.get("msg") or "the signal failed")
        bad = [f"{c}: {m['error']}" for c, m in (one.get("members") or {}).items() if "error" in m]
        return "; ".join(bad)
    return "the signal was not sent there"


def outcome(
    stopped: Sequence[Mapping[str, Any]],
    rechecks: Sequence[Mapping[str, Any]],
    started: Mapping[str, Any],
    checked: Mapping[str, Any],
) -> dict[str, Any]:
    """The repair of every session of the ledger's ``stopped`` (and ``recheck``) rows,
    from each agent's registered result (agent -> result; None where the play did not
    run there): ``restarted`` (every container started and its mesh checked) and
    ``restart_failed`` (session -> what went wrong)."""
    errors: dict[str, list[str]] = {str(r["session"]): [] for r in stopped}
    for rows, results, what in ((stopped, started, "start"), (rechecks, checked, "mesh check")):
        for row in rows:
            name, agent = str(row["session"]), str(row["agent"])
            said = _result_error(results.get(agent), name, what)
            if said:
                errors.setdefault(name, []).append(f"{agent}: {said}")
    return {
        "restarted": sorted(n for n, e in errors.items() if not e),
        "restart_failed": {n: "; ".join(e) for n, e in sorted(errors.items()) if e},
    }


def _result_error(result: Any, session: str, what: str) -> str:
    """What one agent's registered result says went wrong for ``session`` ("" if nothing)."""
    if not result:
        return f"no {what} ran there"
    if result.get("unreachable") or result.get("failed"):
        return str(result.get("msg") or f"the {what} failed")
    mine = (result.get("sessions") or {}).get(session)
    if mine is None:
        return f"no {what} of this session ran there"
    return str(mine.get("error") or "")
