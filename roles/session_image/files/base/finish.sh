#!/bin/sh
# Finish a debootstrap root file system: make it small and fit for offline apt use.
set -eu
root=$1
# The mirror may be a frozen snapshot whose Release files have expired.
echo 'Acquire::Check-Valid-Until "false";' > "$root/etc/apt/apt.conf.d/99bai-snapshot"
# Keep images small: no docs, man pages or translations in later installs either.
cat > "$root/etc/dpkg/dpkg.cfg.d/90bai-nodoc" <<'CFG'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
CFG
echo 'APT::Install-Recommends "false";' > "$root/etc/apt/apt.conf.d/90bai-norecommends"
# As Docker's official Debian images do: no package caches left behind by apt.
cat > "$root/etc/apt/apt.conf.d/90bai-clean" <<'CFG'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
       "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*.log
find "$root/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
# Empty apt lists with an old mtime: apt's cache_valid_time then refreshes them.
touch -d @0 "$root/var/lib/apt/lists"
