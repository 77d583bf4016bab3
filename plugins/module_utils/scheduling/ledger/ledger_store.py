"""Where the session ledger is kept, and the one way to change it: a transaction.

Two stores, one protocol (:func:`transact`): read the ledger, let a step decide (place,
confirm, release, reconcile) on what was read, write the result only if nothing changed
it in between.

- :class:`SwarmStore`: the ledger of a cluster with a swarm lives in the swarm's own
  replicated raft store, served by every manager: the labels of one config object
  (:data:`CONFIG_NAME`). A config's data never changes, its labels may, and every update
  names the object version it read: a writer that read an older version gets "update out
  of sequence" and starts again from a fresh read (compare-and-swap). Any manager with a
  quorum serves it, so losing one manager of three loses nothing.
- :class:`FileStore`: without a swarm, one JSON file on one host, changed under an
  exclusive ``flock``; written to a temporary file, fsynced, renamed, folder fsynced.

Either way the ledger has an identity (the swarm's cluster ID, or the file ledger's
``PATH.id``), so containers can say which ledger counts them, and a ledger never read
before (``missing``) is never mistaken for an empty one. Time: the ledger's own clock is
the store host's clock, never allowed to run backwards (:func:`ledger_now`), so a
reservation written through one manager and checked through another is not judged by a
clock that lags it.
"""

from __future__ import annotations

import os
import platform
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple, Union

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    LedgerError,
    Stale,
    StoreError,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.locks import locked
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    counters,
    document,
)

# The swarm config object that holds the ledger, and the label its JSON lives in.
CONFIG_NAME = "bai-session-ledger"
LEDGER_LABEL = "ai.backend.cluster.ledger"
# What the config's (immutable) data says to a person who finds it.
CONFIG_DATA = b"bai-cluster session ledger: the state is in the label ai.backend.cluster.ledger\n"
# Limits of the swarm's store: a config's data at most 500 KiB, one raft entry about
# 1.5 MiB. The ledger refuses to write past this (prune ended sessions; it keeps none).
MAX_LEDGER_BYTES = 1_000_000
# How often a write that met a newer version starts again (each attempt re-reads).
MAX_ATTEMPTS = 40
# Seconds a manager waits for its swarm to elect a leader (after the leader was lost)
# before it says it cannot serve the ledger.
QUORUM_WAIT_S = 45.0


class Snapshot(NamedTuple):
    """One read of the ledger."""

    ledger: document.Ledger  # empty() when missing or damaged
    missing: str  # "" (it is there), "new" (never written) or "lost" (written before)
    damaged: str  # why it cannot be read ("" when it can)
    token: Any  # what a write compares against (the swarm object's version)


def ledger_ids(identity: str, ledger: document.Ledger) -> list[str]:
    """The ledger's identity, then the identities of ledgers it adopted (reconcile
    --adopt-ledger): every ledger whose sessions it counts as its own."""
    aliases = [str(x) for x in ledger.aliases or () if x and x != identity]
    return [identity, *aliases] if identity else aliases


def identity_read(snapshot: Snapshot, now: float) -> dict[str, Any]:
    """state=identity: the store answers (the module adds its identity), and whether its
    ledger is missing or damaged; nothing else of the ledger is read."""
    if snapshot.damaged:
        return {"changed": False, "ledger_time": now, "damaged": snapshot.damaged}
    read: dict[str, Any] = {"changed": False, "ledger_time": now}
    if snapshot.missing:
        read["missing"] = True
    return read


def ledger_now(ledger: document.Ledger, clock: float) -> float:
    """The ledger's time: this host's clock, never before the last time the ledger wrote
    (another manager's clock may have been ahead)."""
    return max(clock, float(ledger.clock or 0.0))


class FileStore:
    """The ledger as one JSON file on this host (no swarm)."""

    kind = "file"

    def __init__(self, path: str, lock_timeout: float) -> None:
        self.path = path
        self.lock_timeout = lock_timeout
        self.new_id = ""

    @property
    def where(self) -> str:
        return f"the session ledger {self.path}"

    def identity(self, create: bool = False) -> str:
        """The uuid in PATH.id, written with the first write; before it, "" (or, with
        ``create``, the one the next write will keep)."""
        try:
            with open(self.path + ".id", encoding="utf-8") as handle:
                return handle.read().strip()
        except FileNotFoundError:
            if create and not self.new_id:
                self.new_id = uuid.uuid4().hex
            return self.new_id

    def _make_identity(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        try:
            fd = os.open(self.path + ".id", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return
        with open(fd, "w") as handle:
            handle.write((self.new_id or uuid.uuid4().hex) + "\n")

    def guard(self) -> Any:
        """The ledger's lock (raises errors.Busy on entry when it stays taken)."""
        return locked(self.path + ".lock", self.lock_timeout)

    def load(self) -> Snapshot:
        try:
            with open(self.path, encoding="utf-8") as handle:
                text = handle.read()
        except FileNotFoundError:
            lost = os.path.exists(self.path + ".id")
            return Snapshot(document.empty(), "lost" if lost else "new", "", None)
        try:
            return Snapshot(document.loads(text), "", "", None)
        except LedgerError as exc:
            return Snapshot(document.empty(), "", str(exc), None)

    def save(self, ledger: document.Ledger, snapshot: Snapshot) -> None:
        """Write atomically: a temporary file in the same folder, fsync, rename, fsync the
        folder. The first write also makes PATH.id, the ledger's identity, which tells a
        lost ledger from one never written."""
        path = self.path
        self._make_identity()
        fd, tmp = tempfile.mkstemp(prefix=".ledger.", dir=os.path.dirname(path) or ".")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(document.dumps(ledger))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
            # The rename is durable only once the folder is.
            folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def set_aside(self, snapshot: Snapshot, now: float) -> str:
        """Keep a damaged ledger beside the new one: PATH.damaged-EPOCH."""
        aside = f"{self.path}.damaged-{int(now)}"
        os.replace(self.path, aside)
        return aside


class SwarmStore:
    """The ledger in the swarm's raft store: the labels of config :data:`CONFIG_NAME`,
    reached through this host's engine, which must be a manager of an active swarm."""

    kind = "swarm"

    def __init__(self, api: Any, cluster_id: str) -> None:
        self.api = api
        self.cluster_id = cluster_id

    @classmethod
    def connect(
        cls,
        api: Any,
        host: str,
        wait: float = QUORUM_WAIT_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> SwarmStore:
        """The store behind this engine, or StoreError when it is no manager of a swarm.
        A manager that has no leader right now (an election after the leader was lost:
        ``docker info`` then gives no cluster) is asked again, up to ``wait`` seconds."""
        deadline = time.monotonic() + wait
        while True:
            swarm = api.info().get("Swarm") or {}
            cluster = (swarm.get("Cluster") or {}).get("ID") or ""
            active = swarm.get("LocalNodeState") == "active"
            managers = {m.get("NodeID") for m in swarm.get("RemoteManagers") or ()}
            manager = bool(swarm.get("ControlAvailable")) or swarm.get("NodeID") in managers
            if active and swarm.get("ControlAvailable") and cluster:
                return cls(api, cluster)
            if not (active and manager):
                raise StoreError(
                    f"{host} is not a manager of an active swarm (node state "
                    f"{swarm.get('LocalNodeState') or 'unknown'}), so it cannot serve the "
                    f"session ledger kept in the swarm; use a manager that answers (the session "
                    f"playbooks pick the first one of group manager that does)"
                )
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"{host} is a manager, but its swarm has had no leader for {wait:.0f} s "
                    f"(no quorum: fewer than a majority of the managers are up)"
                )
            sleep(1.0)

    @property
    def where(self) -> str:
        return f"the session ledger in the swarm (config {CONFIG_NAME})"

    def identity(self, create: bool = False) -> str:
        return self.cluster_id

    def guard(self) -> Any:
        return _nothing()

    def _inspect(self) -> dict[str, Any] | None:
        from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
            APIError,
            error_text,
        )

        try:
            found: dict[str, Any] = self.api.inspect_config(CONFIG_NAME)
        except APIError as exc:
            if getattr(exc, "status_code", None) == 404:
                return None
            raise StoreError(f"{self.where} cannot be read: {error_text(exc)}") from None
        # inspect resolves an ID prefix too: only the object of exactly this name counts.
        return found if (found.get("Spec") or {}).get("Name") == CONFIG_NAME else None

    def load(self) -> Snapshot:
        found = self._inspect()
        if found is None:
            return Snapshot(document.empty(), "new", "", None)
        labels = (found.get("Spec") or {}).get("Labels") or {}
        token = (found["ID"], int((found.get("Version") or {}).get("Index") or 0), labels)
        try:
            return Snapshot(document.loads(labels.get(LEDGER_LABEL, "")), "", "", token)
        except LedgerError as exc:
            return Snapshot(document.empty(), "", str(exc), token)

    def save(self, ledger: document.Ledger, snapshot: Snapshot) -> None:
        from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
            APIError,
            error_text,
        )

        text = document.dumps_compact(ledger)
        if len(text) > MAX_LEDGER_BYTES:
            raise StoreError(
                f"{self.where} would grow to {len(text)} bytes, past the {MAX_LEDGER_BYTES} "
                f"this toolkit writes into one raft entry; destroy ended sessions"
            )
        try:
            if snapshot.token is None:
                self.api.create_config(CONFIG_NAME, CONFIG_DATA, labels={LEDGER_LABEL: text})
                return
            config_id, version, labels = snapshot.token
            labels = {**labels, LEDGER_LABEL: text}
            url = self.api._url("/configs/{0}/update", config_id)
            response = self.api._post_json(
                url, data={"Name": CONFIG_NAME, "Labels": labels}, params={"version": version}
            )
            self.api._raise_for_status(response)
        except APIError as exc:
            reason = error_text(exc)
            # A newer version (another writer, or the engine's own) or a create that lost
            # the race for the name: read again. Nothing else is retried.
            if "out of sequence" in reason or (
                snapshot.token is None and getattr(exc, "status_code", None) == 409
            ):
                raise Stale(reason) from None
            raise StoreError(f"{self.where} cannot be written: {reason}") from None

    def set_aside(self, snapshot: Snapshot, now: float) -> str:
        """Keep a damaged ledger as config CONFIG_NAME-damaged-EPOCH (its data: the text)."""
        from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import APIError

        _config_id, _version, labels = snapshot.token
        aside = f"{CONFIG_NAME}-damaged-{int(now)}"
        data = (labels.get(LEDGER_LABEL) or "").encode("utf-8")[:400_000] or b"(empty)\n"
        try:
            self.api.create_config(aside, data)
        except APIError as exc:
            if getattr(exc, "status_code", None) != 409:  # kept by an earlier attempt
                raise
        return aside


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


Store = Union[FileStore, SwarmStore]

# The options that say where the ledger is (documented by the bai.cluster.ledger_store
# fragment); each module adds its own lock_timeout.
STORE_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "store": {"type": "str", "choices": ["file", "swarm"], "default": "file"},
    "path": {"type": "path", "default": "/var/lib/bai-cluster/ledger.json"},
}


def open_store(module: Any) -> Store:
    """The store a module's options name (``store``, ``path``, ``lock_timeout``): the file,
    or the swarm behind this host's engine; fail_json when it cannot be had. Only the
    swarm's store imports the Docker SDK (a file ledger's module run is 0.2 s faster)."""
    params = module.params
    if params["store"] == "file":
        return FileStore(params["path"], params["lock_timeout"])
    from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
        DockerException,
        connect,
        error_text,
    )

    docker_ = connect(module)
    try:
        return SwarmStore.connect(docker_.api, platform.node())
    except StoreError as exc:
        module.fail_json(msg=str(exc))
    except DockerException as exc:
        module.fail_json(msg=f"the session ledger in the swarm: {error_text(exc)}")
    raise AssertionError("unreachable")  # pragma: no cover


def engine_errors(store: Store) -> tuple[type[BaseException], ...]:
    """What a step on ``store`` may raise from the engine: OSError, and the Docker SDK's
    errors when the store is the swarm's (a file ledger never imports the SDK)."""
    if not isinstance(store, SwarmStore):
        return (OSError,)
    from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
        DockerException,
    )

    return (DockerException, OSError)


Step = Callable[[Snapshot, float], dict[str, Any]]


def transact(
    store: Store,
    step: Step,
    *,
    write: bool = True,
    clock: Callable[[], float] = time.time,
    attempts: int = MAX_ATTEMPTS,
) -> dict[str, Any]:
    """Read the ledger, run ``step(snapshot, now)`` and write ``snapshot.ledger`` when the
    step's result asks for it (``save``, or ``changed``) and ``write`` (not check mode).

    The file store runs it under its lock (``Busy`` when the lock stays taken); the swarm
    store runs it optimistically and starts again from a fresh read when another writer
    got in between (:class:`Stale`), at most ``attempts`` times. The step must decide only
    from what it is given. It may set ``set_aside`` in its result to keep a damaged ledger.
    The result's ``attempts`` says how many reads it took.
    """
    for attempt in range(1, attempts + 1):
        with store.guard():
            snapshot = store.load()
            now = ledger_now(snapshot.ledger, clock())
            result = step(snapshot, now)
            save = bool(result.pop("save", False) or result.get("changed"))
            aside = result.pop("set_aside", False)
            if not (save and write):
                return {**result, "attempts": attempt}
            snapshot.ledger.clock = now
            counters.count_retries(snapshot.ledger, attempt - 1)
            try:
                if aside and snapshot.damaged:
                    result["set_aside_as"] = store.set_aside(snapshot, now)
                store.save(snapshot.ledger, snapshot)
            except Stale:
                time.sleep(random.uniform(0.01, 0.05 * min(attempt, 10)))
                continue
            return {**result, "attempts": attempt}
    raise StoreError(
        f"{store.where} changed under this write {attempts} times in a row (very many "
        f"concurrent creates?); nothing was changed, try again"
    )
