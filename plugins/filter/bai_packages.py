"""Filters over dpkg-query's answer (plugins/module_utils/hosts/packages.py)."""

from __future__ import annotations

from typing import ClassVar

from ansible_collections.bai.cluster.plugins.module_utils.hosts.packages import (
    installed_versions,
    missing_packages,
)
from ansible_collections.bai.cluster.plugins.plugin_utils.filters import Filters, FilterTable


class FilterModule(FilterTable):
    """Ansible entry point.

    stdout | bai_dpkg_missing(wanted)   the entries of wanted that are not installed
    stdout | bai_dpkg_versions          {name: version} of the installed packages
    """

    FILTERS: ClassVar[Filters] = {
        "bai_dpkg_missing": missing_packages,
        "bai_dpkg_versions": installed_versions,
    }
