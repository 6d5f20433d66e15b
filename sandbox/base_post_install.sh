#!/bin/sh
# Runs inside the fresh bookworm root (chroot) before it is packed and imported.
set -eu
cat > /etc/apt/sources.list <<'SRC'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SRC
# An unprivileged user for sandboxes started with user="horizon" (uid 1000).
id horizon >/dev/null 2>&1 || useradd --create-home --uid 1000 --shell /bin/bash horizon
# The default workdir; writable by any user the sandbox runs as.
mkdir -p /workspace && chmod 1777 /workspace
git config --system init.defaultBranch main
git config --system --add safe.directory '*'
# Docker manages these at run time.
rm -f /etc/hostname /etc/resolv.conf
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log /tmp/* /usr/share/doc/* /usr/share/man/*
