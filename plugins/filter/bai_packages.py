"""Filters over dpkg-query's answer (plugins/module_utils/hosts/packages.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.hosts.packages import (
    installed_versions,
    missing_packages,
)


class FilterModule:
    """Ansible entry point.

    stdout | bai_dpkg_missing(wanted)   the entries of wanted that are not installed
    stdout | bai_dpkg_versions          {name: version} of the installed packages
    """

    def filters(self) -> dict[str, Any]:
        return {"bai_dpkg_missing": missing_packages, "bai_dpkg_versions": installed_versions}
