"""A Docker engine in memory, and a way to run a bai_* module's ``main()`` against it.

SIMULATED: ``FakeEngine`` stands in for the Docker engine ONLY in the unit tests
(tests/unit/plugins/modules/test_module_*.py), so that a module runs end to end - its argument spec,
its checks, its calls to Docker and what it reports - in milliseconds and with no
Docker anywhere. The integration suite (tests/integration, ``make test``) runs the same
modules against real engines; what this file gets wrong about Docker is caught there.

``FakeEngine`` answers the low-level ``docker.APIClient`` methods that
plugins/module_utils (docker_api.py, session_containers.py, session_network.py) call,
and only those. Each call is checked against docker-py's own signature of that method
(a misspelt keyword fails here as it would against the SDK), the configs are built by
docker-py's own types (``HostConfig``, ``ContainerConfig``, ``NetworkingConfig``,
``EndpointConfig`` at API version 1.41, Debian 12's Docker 20.10), and the engine keeps
what a real one would: containers (config, state, log, the archives put into them,
networks and aliases, published ports), images, networks (subnets, labels, endpoints)
and exec instances. It refuses what a real engine refuses (a name in use, an image or
network that is not there, a subnet that overlaps, removing a network with endpoints,
exec in a stopped container), with docker-py's exception types.

The session image's behaviour is modelled where the modules depend on it:

- ``start`` logs sshd's ``Server listening on ...`` (what bai_session_containers waits
  for); ``crash`` makes a container exit instead, with its log.
- The entrypoint reads the session keys from ``/opt/bai/session`` at start only, so an
  SSH login to a container works only if it got the keys (``put_archive``) before it
  started, and only by its hostname on a network both containers share (Docker's DNS
  answers network aliases; the default bridge answers none).
- ``exec`` of the SSH mesh check (``bash -c SCRIPT mesh HOST...``, plugins/module_utils/
  mesh.py) prints ``ok HOST`` or ``FAILED HOST: ...`` per host and exits 1 when one failed;
  ``unreachable`` makes a host refuse connections.

Faults: ``fail(method, name, error)`` makes that call raise ``error`` for that container
(e.g. ``start`` of the second container) or, for ``create_network``, that network, once or
every time.

What it holds, for the tests' assertions: ``store`` (container id -> ``Container``),
``nets`` (network id -> the network as ``GET /networks`` lists it), ``calls`` ((method,
container or network name) in order), ``log_reads`` and ``connections`` (how many times
a module connected).

``run_module`` runs a module's ``main()`` with its arguments (as the controller sends
them, JSON round trip included), ``connect`` patched to hand it this engine, and
``exit_json``/``fail_json`` raising instead of exiting, the way community.docker tests
its modules.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import ipaddress
import itertools
import re
import tarfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import docker
import pytest
import requests
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from docker.errors import APIError, ImageNotFound, NotFound

API_VERSION = "1.41"  # Docker 20.10 (Debian 12's docker.io), the oldest engine supported
GI = 1024**3
SSHD_LISTENING = b"Server listening on 0.0.0.0 port 2200.\n"
SESSION_KEYS_PATH = "/opt/bai"
SESSION_KEY_MEMBERS = ("session/id_cluster", "session/id_cluster.pub", "session/host_key")
DEFAULT_IMAGE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
BUILTIN_NETWORKS = (("bridge", "bridge", "172.17.0.0/16"), ("host", "host", None))
EPHEMERAL_PORTS = range(32768, 61000)


def api_error(status: int, explanation: str, cls: type[APIError] = APIError) -> APIError:
    """A docker-py exception as the SDK raises it for an engine's HTTP error."""
    response = requests.Response()
    response.status_code = status
    response.reason = explanation
    return cls(f"{status} Server Error: {explanation}", response=response, explanation=explanation)


def _bind(method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The call's arguments by name, with docker-py's defaults; TypeError as the SDK
    would raise for an argument its ``APIClient.method`` does not take."""
    signature = inspect.signature(getattr(docker.APIClient, method))
    bound = signature.bind(None, *args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop("self")
    return arguments


def _tar_members(data: bytes) -> dict[str, tuple[int, int, bytes | None]]:
    """name -> (mode, uid, content or None for a folder) of a tar archive; the engine
    answers 400 to anything else."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            members = {}
            for info in tar.getmembers():
                content = tar.extractfile(info).read() if info.isfile() else None
                members[info.name.rstrip("/")] = (info.mode, info.uid, content)
            return members
    except tarfile.TarError as exc:
        raise api_error(400, f"Error processing tar file: {exc}") from None


@dataclass
class Container:
    """One container as the engine keeps it."""

    id: str
    name: str
    image: str
    config: dict[str, Any]  # docker-py's ContainerConfig, HostConfig and NetworkingConfig in it
    created: float
    status: str = "created"  # created, running or exited
    exit_code: int = 0
    restart_count: int = 0
    log: list[tuple[float, bytes]] = field(default_factory=list)
    archives: list[tuple[str, dict[str, tuple[int, int, bytes | None]]]] = field(
        default_factory=list
    )
    networks: dict[str, list[str]] = field(default_factory=dict)  # network id -> aliases
    ports: list[dict[str, Any]] = field(default_factory=list)  # published while running
    keys_at_start: bool = False  # the session keys were there when the entrypoint ran

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.config.get("Labels") or {})

    @property
    def host_config(self) -> dict[str, Any]:
        return dict(self.config.get("HostConfig") or {})

    @property
    def env(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.config.get("Env") or [])

    @property
    def hostname(self) -> str:
        return str(self.config.get("Hostname") or self.id[:12])

    def has_session_keys(self) -> bool:
        got = {
            name for path, members in self.archives if path == SESSION_KEYS_PATH for name in members
        }
        return all(name in got for name in SESSION_KEY_MEMBERS)


class FakeEngine:
    """The low-level ``docker.APIClient`` of one engine, in memory (see the module
    docstring). ``calls`` records (method, container or network name) in order."""

    def __init__(
        self,
        *,
        engine_id: str = "ABCD:EFGH:IJKL:MNOP:QRST:UVWX:YZ01:2345:6789:ABCD:EFGH:IJKL",
        ncpu: int = 8,
        mem_total: int = 16 * GI,
        images: dict[str, list[str]] | None = None,
        networks: dict[str, str] | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.engine_id = engine_id
        self.ncpu = ncpu
        self.mem_total = mem_total
        self.store: dict[str, Container] = {}
        self.image_store: dict[str, dict[str, Any]] = {}
        self.nets: dict[str, dict[str, Any]] = {}
        self.execs: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.log_reads: list[tuple[str, Any]] = []  # (container name, since) of each logs()
        self.faults: dict[tuple[str, str], tuple[Exception, bool]] = {}
        self.crashes: dict[str, tuple[int, bytes]] = {}
        self.unreachable: set[str] = set()
        # The health gate's faults ({host: (check, detail)}) and how many more runs see them.
        self.gate_faults: dict[str, tuple[str, str]] = {}
        self.gate_faults_left: int | None = None
        self.gate_runs = 0
        self.gate_checks: list[str] = []  # each run's checks, as its argument
        self.connections = 0
        self._ids = itertools.count(1)
        for ref, env in (images or {"bai/session:latest": list(DEFAULT_IMAGE_ENV)}).items():
            self.add_image(ref, env)
        for name, driver, subnet in BUILTIN_NETWORKS:
            self._add_network(name, driver, subnet, labels={})
        for name, subnet in (networks or {}).items():
            self._add_network(name, "bridge", subnet, labels={})

    # --- test controls ------------------------------------------------------------------
    def add_image(self, ref: str, env: list[str] | tuple[str, ...] = DEFAULT_IMAGE_ENV) -> None:
        digest = hashlib.sha256(ref.encode()).hexdigest()
        self.image_store[_tagged(ref)] = {
            "Id": f"sha256:{digest}",
            "RepoTags": [_tagged(ref)],
            "Config": {"Env": list(env), "Entrypoint": ["/opt/bai/entrypoint.sh"]},
        }

    def fail(self, method: str, name: str, error: Exception, *, always: bool = False) -> None:
        """Make ``method`` raise ``error`` for container (or, for create_network, network)
        ``name``, once or ``always``."""
        self.faults[(method, name)] = (error, always)

    def crash(self, name: str, exit_code: int, log: bytes) -> None:
        """Make container ``name`` exit at its start with ``log``, before sshd listens."""
        self.crashes[name] = (exit_code, log)

    def stop(self, container: str, timeout: int | None = None) -> None:
        """``docker stop`` (also an APIClient method)."""
        _bind("stop", container, timeout)
        with self.lock:
            found = self._container(container, "stop")
            if found.status == "running":
                found.status, found.exit_code, found.ports = "exited", 0, []

    def session_containers(self, session: str) -> list[Container]:
        """The containers labelled with session ``session``, by name."""
        from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_SESSION

        found = [c for c in self.store.values() if c.labels.get(LABEL_SESSION) == session]
        return sorted(found, key=lambda c: c.name)

    def by_name(self, name: str) -> Container:
        return next(c for c in self.store.values() if c.name == name)

    def network_named(self, name: str) -> dict[str, Any] | None:
        return next((n for n in self.nets.values() if n["Name"] == name), None)

    def called(self, method: str) -> list[str]:
        """The targets of every call of ``method``, in order."""
        return [target for called, target in self.calls if called == method]

    # --- engine -----------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        self._record("info", "")
        return {
            "ID": self.engine_id,
            "Name": "agent1",
            "NCPU": self.ncpu,
            "MemTotal": self.mem_total,
            "ServerVersion": "20.10.24+dfsg1",
            "Swarm": {"NodeID": "", "LocalNodeState": "inactive"},
        }

    def events(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        _bind("events", *args, **kwargs)
        self._record("events", "")
        return []

    # --- images -------------------------------------------------------------------------
    def inspect_image(self, image: str) -> dict[str, Any]:
        _bind("inspect_image", image)
        self._record("inspect_image", image)
        found = self.image_store.get(_tagged(image)) or next(
            (i for i in self.image_store.values() if i["Id"] == image), None
        )
        if found is None:
            raise api_error(404, f"No such image: {image}", ImageNotFound)
        return found

    # --- containers ---------------------------------------------------------------------
    def containers(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        call = _bind("containers", *args, **kwargs)
        self._record("containers", "")
        filters = dict(call["filters"] or {})
        unknown = set(filters) - {"label", "name"}
        if unknown:
            raise NotImplementedError(f"FakeEngine.containers: filter(s) {unknown} not modelled")
        with self.lock:
            found = []
            for c in sorted(self.store.values(), key=lambda c: -c.created):
                if not call["all"] and c.status != "running":
                    continue
                if not all(_label_matches(c.labels, want) for want in filters.get("label", [])):
                    continue
                names = filters.get("name")
                if names and not any(
                    re.search(p, "/" + c.name) or re.search(p, c.name) for p in names
                ):
                    continue
                found.append(self._list_entry(c))
            return found

    def create_host_config(self, *args: Any, **kwargs: Any) -> docker.types.HostConfig:
        return docker.types.HostConfig(API_VERSION, *args, **kwargs)

    def create_networking_config(self, *args: Any, **kwargs: Any) -> Any:
        return docker.types.NetworkingConfig(*args, **kwargs)

    def create_endpoint_config(self, *args: Any, **kwargs: Any) -> Any:
        return docker.types.EndpointConfig(API_VERSION, *args, **kwargs)

    def create_container(self, image: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        call = _bind("create_container", image, *args, **kwargs)
        name = call.pop("name")
        call.pop("platform")
        call.pop("use_config_proxy")
        if isinstance(call["environment"], dict):
            call["environment"] = docker.utils.format_environment(call["environment"])
        config = docker.types.ContainerConfig(API_VERSION, **call)
        self._record("create_container", name or "")
        self._fault("create_container", name or "")
        with self.lock:
            if name and any(c.name == name for c in self.store.values()):
                holder = next(c for c in self.store.values() if c.name == name)
                raise api_error(
                    409,
                    f'Conflict. The container name "/{name}" is already in use by container '
                    f'"{holder.id}". You have to remove (or rename) that container to be able '
                    f"to reuse that name.",
                )
            if _tagged(image) not in self.image_store:
                raise api_error(404, f"No such image: {image}", ImageNotFound)
            attach = self._attachments(config)
            number = next(self._ids)
            cid = hashlib.sha256(f"{name}-{number}".encode()).hexdigest()
            self.store[cid] = Container(
                id=cid,
                name=name or f"fake_{number}",
                image=image,
                config=dict(config),
                created=time.time() + number * 1e-6,
                networks=attach,
            )
        return {"Id": cid, "Warnings": []}

    def put_archive(self, *args: Any, **kwargs: Any) -> bool:
        call = _bind("put_archive", *args, **kwargs)
        with self.lock:
            found = self._container(call["container"], "put_archive")
            self._fault("put_archive", found.name)
            found.archives.append((call["path"], _tar_members(call["data"])))
        return True

    def start(self, container: str, *args: Any, **kwargs: Any) -> None:
        _bind("start", container, *args, **kwargs)
        with self.lock:
            found = self._container(container, "start")
            self._fault("start", found.name)
            if found.status == "running":
                return  # 304 Not Modified: docker-py does not raise
            found.ports = self._publish(found)
            now = time.time()
            found.keys_at_start = found.has_session_keys()
            if found.name in self.crashes:
                code, log = self.crashes[found.name]
                found.log.append((now, log))
                found.status, found.exit_code, found.ports = "exited", code, []
                return
            found.status = "running"
            found.log.append((now, SSHD_LISTENING))

    def logs(self, container: str, *args: Any, **kwargs: Any) -> bytes:
        call = _bind("logs", container, *args, **kwargs)
        with self.lock:
            found = self._container(container, "logs")
            self.log_reads.append((found.name, call["since"]))
            since = call["since"] or 0
            return b"".join(line for at, line in found.log if at >= since)

    def inspect_container(self, container: str) -> dict[str, Any]:
        _bind("inspect_container", container)
        with self.lock:
            found = self._container(container, "inspect_container")
            return {
                "Id": found.id,
                "Name": "/" + found.name,
                "Image": self.image_store[_tagged(found.image)]["Id"],
                "RestartCount": found.restart_count,
                "State": {
                    "Status": found.status,
                    "Running": found.status == "running",
                    "Paused": False,
                    "Restarting": False,
                    "ExitCode": found.exit_code,
                },
                "Config": {k: v for k, v in found.config.items() if k != "HostConfig"},
                "HostConfig": found.host_config,
                "NetworkSettings": {
                    "Networks": {
                        self.nets[nid]["Name"]: {"NetworkID": nid, "Aliases": aliases}
                        for nid, aliases in found.networks.items()
                    },
                    "Ports": {
                        f"{p['PrivatePort']}/{p['Type']}": [
                            {"HostIp": p["IP"], "HostPort": str(p["PublicPort"])}
                        ]
                        for p in found.ports
                    },
                },
            }

    def remove_container(self, container: str, *args: Any, **kwargs: Any) -> None:
        call = _bind("remove_container", container, *args, **kwargs)
        with self.lock:
            found = self._container(container, "remove_container")
            self._fault("remove_container", found.name)
            if found.status == "running" and not call["force"]:
                raise api_error(
                    409,
                    f"You cannot remove a running container {found.id}. Stop the container "
                    f"before attempting removal or force remove",
                )
            del self.store[found.id]

    # --- exec ---------------------------------------------------------------------------
    def exec_create(self, container: str, cmd: Any, *args: Any, **kwargs: Any) -> dict[str, str]:
        call = _bind("exec_create", container, cmd, *args, **kwargs)
        with self.lock:
            found = self._container(container, "exec_create")
            if found.status != "running":
                raise api_error(409, f"Container {found.id} is not running")
            exec_id = hashlib.sha256(f"exec-{next(self._ids)}".encode()).hexdigest()
            argv = [cmd] if isinstance(cmd, str) else list(cmd)
            self.execs[exec_id] = {"container": found.id, "cmd": argv, "user": call["user"]}
        return {"Id": exec_id}

    def exec_start(self, exec_id: Any, *args: Any, **kwargs: Any) -> bytes:
        _bind("exec_start", exec_id, *args, **kwargs)
        with self.lock:
            run = self._exec(exec_id)
            source = self.store[run["container"]]
            self._record("exec_start", source.name)
            code, out = self._run(source, run["cmd"], run["user"])
            run["ExitCode"] = code
        return out

    def exec_inspect(self, exec_id: Any) -> dict[str, Any]:
        _bind("exec_inspect", exec_id)
        run = self._exec(exec_id)
        return {"ID": exec_id, "Running": False, "ExitCode": run.get("ExitCode")}

    # --- networks -----------------------------------------------------------------------
    def networks(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        call = _bind("networks", *args, **kwargs)
        self._record("networks", "")
        filters = dict(call["filters"] or {})
        unknown = set(filters) - {"label", "name", "driver"}
        if unknown:
            raise NotImplementedError(f"FakeEngine.networks: filter(s) {unknown} not modelled")
        names = list(call["names"] or []) + list(filters.get("name", []))
        with self.lock:
            found = []
            for item in self.nets.values():
                # Docker's name filter matches a part of the name.
                if names and not any(n in item["Name"] for n in names):
                    continue
                if call["ids"] and not any(item["Id"].startswith(i) for i in call["ids"]):
                    continue
                if not all(_label_matches(item["Labels"], w) for w in filters.get("label", [])):
                    continue
                if filters.get("driver") and item["Driver"] not in filters["driver"]:
                    continue
                found.append({k: v for k, v in item.items() if k != "Containers"})
            return found

    def inspect_network(self, net_id: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        _bind("inspect_network", net_id, *args, **kwargs)
        with self.lock:
            item = self._network(net_id)
            endpoints = {
                c.id: {"Name": c.name} for c in self.store.values() if item["Id"] in c.networks
            }
            return {**item, "Containers": endpoints}

    def create_network(self, name: str, *args: Any, **kwargs: Any) -> dict[str, str]:
        call = _bind("create_network", name, *args, **kwargs)
        self._record("create_network", name)
        self._fault("create_network", name)
        driver = call["driver"] or "bridge"
        with self.lock:
            if driver == "overlay":
                raise api_error(
                    503,
                    'This node is not a swarm manager. Use "docker swarm init" or "docker '
                    'swarm join" to connect this node to swarm and try again.',
                )
            if any(n["Name"] == name for n in self.nets.values()):
                raise api_error(409, f"network with name {name} already exists")
            pools = ((call["ipam"] or {}).get("Config")) or []
            subnet = pools[0]["Subnet"] if pools else self._free_default_subnet()
            new = ipaddress.ip_network(subnet)
            for item in self.nets.values():
                for config in item["IPAM"]["Config"]:
                    if new.overlaps(ipaddress.ip_network(config["Subnet"])):
                        raise api_error(403, "Pool overlaps with other one on this address space")
            item = self._add_network(
                name, driver, subnet, labels=dict(call["labels"] or {}), options=call["options"]
            )
        return {"Id": item["Id"], "Warning": ""}

    def remove_network(self, net_id: str) -> None:
        _bind("remove_network", net_id)
        with self.lock:
            item = self._network(net_id)
            self._record("remove_network", item["Name"])
            if any(item["Id"] in c.networks for c in self.store.values()):
                raise api_error(
                    403,
                    f"error while removing network: network {item['Name']} id {item['Id']} "
                    f"has active endpoints",
                )
            del self.nets[item["Id"]]

    # --- inside ---------------------------------------------------------------------------
    def _record(self, method: str, target: str) -> None:
        with self.lock:
            self.calls.append((method, target))

    def _fault(self, method: str, name: str) -> None:
        fault = self.faults.get((method, name))
        if fault is None:
            return
        error, always = fault
        if not always:
            del self.faults[(method, name)]
        raise error

    def _container(self, ref: str, method: str) -> Container:
        """By full id, name or unique id prefix (as the engine resolves them)."""
        ref = str(ref)
        found = self.store.get(ref) or next(
            (c for c in self.store.values() if c.name == ref.lstrip("/")), None
        )
        if found is None:
            matches = [c for c in self.store.values() if ref and c.id.startswith(ref)]
            found = matches[0] if len(matches) == 1 else None
        self._record(method, found.name if found else ref)
        if found is None:
            raise api_error(404, f"No such container: {ref}", NotFound)
        return found

    def _exec(self, exec_id: Any) -> dict[str, Any]:
        key = exec_id.get("Id") if isinstance(exec_id, dict) else exec_id
        if key not in self.execs:
            raise api_error(404, f"No such exec instance: {key}", NotFound)
        return self.execs[key]

    def _network(self, ref: str) -> dict[str, Any]:
        found = self.nets.get(ref) or next(
            (n for n in self.nets.values() if n["Name"] == ref or n["Id"].startswith(ref)),
            None,
        )
        if found is None:
            raise api_error(404, f"network {ref} not found", NotFound)
        return found

    def _add_network(
        self,
        name: str,
        driver: str,
        subnet: str | None,
        labels: dict[str, str],
        options: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        net_id = hashlib.sha256(f"net-{name}-{next(self._ids)}".encode()).hexdigest()
        item = {
            "Name": name,
            "Id": net_id,
            "Driver": driver,
            "Scope": "local",
            "Attachable": False,
            "IPAM": {"Driver": "default", "Config": [{"Subnet": subnet}] if subnet else []},
            "Options": dict(options or {}),
            "Labels": labels,
        }
        self.nets[net_id] = item
        return item

    def _free_default_subnet(self) -> str:
        for second in range(18, 32):
            subnet = f"172.{second}.0.0/16"
            if not any(
                ipaddress.ip_network(subnet).overlaps(ipaddress.ip_network(c["Subnet"]))
                for n in self.nets.values()
                for c in n["IPAM"]["Config"]
            ):
                return subnet
        raise api_error(400, "could not find an available, non-overlapping IPv4 address pool")

    def _attachments(self, config: dict[str, Any]) -> dict[str, list[str]]:
        """network id -> aliases the container gets; NotFound for a network not here."""
        mode = (config.get("HostConfig") or {}).get("NetworkMode") or "default"
        endpoints = (config.get("NetworkingConfig") or {}).get("EndpointsConfig") or {}
        attach = {}
        for net in [mode if mode != "default" else "bridge", *endpoints]:
            item = self._network(net)
            aliases = list((endpoints.get(net) or {}).get("Aliases") or [])
            attach[item["Id"]] = aliases
        return attach

    def _publish(self, found: Container) -> list[dict[str, Any]]:
        """Host ports for the container's PortBindings (a range: the first free port)."""
        taken = {p["PublicPort"] for c in self.store.values() for p in c.ports}
        published = []
        for port, bindings in (found.host_config.get("PortBindings") or {}).items():
            private, proto = port.split("/")
            for binding in bindings:
                wanted = str(binding.get("HostPort") or "")
                if "-" in wanted:
                    low, high = (int(x) for x in wanted.split("-"))
                    choices = range(low, high + 1)
                else:
                    choices = range(int(wanted), int(wanted) + 1) if wanted else EPHEMERAL_PORTS
                host_port = next((p for p in choices if p not in taken), None)
                if host_port is None:
                    raise api_error(
                        500,
                        f"driver failed programming external connectivity on endpoint "
                        f"{found.name}: Bind for {binding.get('HostIp')}:{wanted} failed: "
                        f"port is already allocated",
                    )
                taken.add(host_port)
                published.append(
                    {
                        "IP": binding.get("HostIp") or "0.0.0.0",
                        "PrivatePort": int(private),
                        "PublicPort": host_port,
                        "Type": proto,
                    }
                )
        return published

    def _list_entry(self, c: Container) -> dict[str, Any]:
        """A container as ``GET /containers/json`` lists it."""
        exposed = [
            {"PrivatePort": int(port.split("/")[0]), "Type": port.split("/")[1]}
            for port in (c.config.get("ExposedPorts") or {})
        ]
        status = {
            "created": "Created",
            "running": "Up 1 second",
            "exited": f"Exited ({c.exit_code}) 1 second ago",
        }[c.status]
        return {
            "Id": c.id,
            "Names": ["/" + c.name],
            "Image": c.image,
            "ImageID": self.image_store[_tagged(c.image)]["Id"],
            "Created": int(c.created),
            "State": c.status,
            "Status": status,
            "Labels": c.labels,
            "Ports": list(c.ports) if c.ports else exposed,
            "HostConfig": {"NetworkMode": c.host_config.get("NetworkMode") or "default"},
        }

    def _run(self, source: Container, argv: list[str], user: str) -> tuple[int, bytes]:
        """What a command run by ``docker exec`` in ``source`` answers."""
        if argv[:2] == ["bash", "-c"] and len(argv) > 3 and argv[3] == "mesh":
            lines, code = [], 0
            for host in argv[4:]:
                problem = self._ssh_problem(source, host, user)
                lines.append(f"ok {host}" if problem is None else f"FAILED {host}: {problem}")
                code = code or (1 if problem else 0)
            return code, ("\n".join(lines) + "\n").encode()
        if argv[:2] == ["bash", "-c"] and len(argv) > 8 and argv[3] == "gate":
            self.gate_checks.append(argv[6])
            return self._gate(source, argv[8 : argv.index("--")], user)
        return 127, f"bash: {argv[0]}: command not found\n".encode()

    def _gate(self, source: Container, hosts: list[str], user: str) -> tuple[int, bytes]:
        """The health gate (containers/gate.py): each host's SSH login, as the mesh check,
        and the faults a test put in ``gate_faults`` ({host: (check, detail)}), each
        answered ``gate_faults_left`` more times (None: always)."""
        lines, code = [], 0
        for host in hosts:
            problem = self._ssh_problem(source, host, user)
            if problem is not None:
                lines.append(f"{host} ssh FAILED {problem}")
                code = 1
                continue
            lines.append(f"{host} ssh ok")
            fault = self.gate_faults.get(host)
            if fault and self.gate_faults_left != 0:
                lines.append(f"{host} {fault[0]} FAILED {fault[1]}")
                code = 1
        if code and self.gate_faults_left:
            self.gate_faults_left -= 1
        self.gate_runs += 1
        return code, ("\n".join(lines) + "\n").encode()

    def _ssh_problem(self, source: Container, host: str, user: str) -> str | None:
        """Why ``ssh HOST hostname`` as ``user`` from ``source`` fails, or None."""
        if not source.keys_at_start:
            return f"{user}@{host}: Permission denied (publickey)."
        target = next(
            (
                c
                for c in self.store.values()
                for nid, aliases in c.networks.items()
                if nid in source.networks and host in aliases and self.nets[nid]["Name"] != "bridge"
            ),
            None,
        )
        if target is None:
            return f"ssh: Could not resolve hostname {host}: Name or service not known"
        if target.status != "running" or host in self.unreachable:
            return f"ssh: connect to host {host} port 2200: Connection refused"
        if user != "work" or not target.keys_at_start:
            return f"{user}@{host}: Permission denied (publickey)."
        return None


class FakeDocker:
    """What ``docker_api.connect`` returns (a ``Docker``): ``.api`` is the client."""

    def __init__(self, engine: FakeEngine) -> None:
        self.api = engine


def _tagged(ref: str) -> str:
    """``repo`` -> ``repo:latest`` (a digest or tag stays)."""
    last = ref.rsplit("/", 1)[-1]
    return ref if ":" in last or "@" in ref else f"{ref}:latest"


def _label_matches(labels: dict[str, str], wanted: str) -> bool:
    """Docker's label filter: ``key`` (present) or ``key=value``."""
    key, sep, value = wanted.partition("=")
    return key in labels and (not sep or labels[key] == value)


# --- running a module ----------------------------------------------------------------------
class ModuleExit(Exception):
    """exit_json was called: ``result`` is what it was given."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result)
        self.result = result


class ModuleFail(ModuleExit):
    """fail_json was called: ``result`` is what it was given (``failed`` set)."""


def _exit_json(self: AnsibleModule, **kwargs: Any) -> None:
    kwargs.setdefault("changed", False)
    kwargs.setdefault("warnings", list(getattr(self, "_fake_warnings", [])))
    raise ModuleExit(kwargs)


def _warn(self: AnsibleModule, warning: str, **_: Any) -> None:
    """AnsibleModule.warn, kept on the module for exit_json's ``warnings`` (the real one
    goes process-wide, or to the controller's display once a test has loaded it)."""
    self.__dict__.setdefault("_fake_warnings", []).append(warning)


def _fail_json(self: AnsibleModule, msg: str, **kwargs: Any) -> None:
    raise ModuleFail({"failed": True, "msg": msg, **kwargs})


def run_module(
    module: Any,
    args: dict[str, Any],
    engine: FakeEngine,
    *,
    check_mode: bool = False,
    patches: dict[tuple[Any, str], Any] | None = None,
) -> dict[str, Any]:
    """Run ``module.main()`` with ``args`` against ``engine``; the result it exited or
    failed with (``failed`` True when it failed). ``patches``: (object, name) -> value,
    set for the run (the host's GPUs, RDMA devices, ...)."""

    def connect(ansible_module: AnsibleModule) -> FakeDocker:
        engine.connections += 1
        return FakeDocker(engine)

    params = dict(args)
    if check_mode:
        params["_ansible_check_mode"] = True
    with pytest.MonkeyPatch.context() as patch:
        if hasattr(module, "connect"):  # a module that talks to an engine itself
            patch.setattr(module, "connect", connect)
        patch.setattr(AnsibleModule, "exit_json", _exit_json)
        patch.setattr(AnsibleModule, "fail_json", _fail_json)
        for (target, name), value in (patches or {}).items():
            patch.setattr(target, name, value)
        patch.setattr(AnsibleModule, "warn", _warn)
        with patch_module_args(params):
            try:
                module.main()
            except ModuleExit as done:
                return done.result
    raise AssertionError(f"{module.__name__}.main() returned without exit_json or fail_json")
