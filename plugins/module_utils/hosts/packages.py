"""dpkg's view of a host's packages, for the roles that install some.

The roles look before they install: ``dpkg-query`` answers in milliseconds, where apt
(and package_facts) need python3-apt, which minimal hosts lack, and an ``apt-get update``.
Each role runs::

    dpkg-query --show --showformat '${Package}\\t${db:Status-Status}\\t${Version}\\n' NAME...

(rc 1 when dpkg has never heard of one of the names, which then has no row) and hands its
stdout to the filters below (plugins/filter/bai_packages.py). Rows split on tabs; rows of
space-separated fields are read too. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_NAME = re.compile(r"^[^\s=<>:]+")


def package_name(spec: str) -> str:
    """The name dpkg knows a package by: "nvidia-container-toolkit=1.17.3-1" and
    "docker-ce:amd64" -> the part before the pin or the architecture."""
    found = _NAME.match(str(spec).strip())
    return found.group() if found else str(spec).strip()


def installed_versions(stdout: str | None) -> dict[str, str]:
    """{name: version} of the packages dpkg-query reports installed ("" when the query
    did not ask for ${Version}). Rows in another state (config-files, half-installed,
    not-installed) do not count."""
    versions: dict[str, str] = {}
    for line in str(stdout or "").splitlines():
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) >= 2 and fields[1].strip() == "installed":
            versions[fields[0].strip()] = fields[2].strip() if len(fields) > 2 else ""
    return versions


def missing_packages(stdout: str | None, wanted: Iterable[str]) -> list[str]:
    """The entries of ``wanted`` (as given, pins kept) whose package is not installed,
    in order, each once."""
    installed = installed_versions(stdout)
    out: list[str] = []
    for spec in wanted or []:
        if package_name(spec) not in installed and spec not in out:
            out.append(spec)
    return out
