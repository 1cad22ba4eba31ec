#!/usr/bin/env bash
# debian_mirror : the Debian archive this machine's apt sources name (deb822 `URIs:` or one-line
# `deb`), else deb.debian.org. Sourced by ci/mongo-emulator/start.sh (debootstrap) and
# ci/cluster/nats.sh (apt-get download), never run.
debian_mirror() {
  local url
  url=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
    sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?//p' |
    awk '{print $1}' | grep -E '/debian/?$' | head -n 1 || true)
  echo "${url:-http://deb.debian.org/debian}"
}
