#!/usr/bin/env bash
# Sourced by the ensure_*.sh scripts: `apt_install NAME PACKAGE WHY [recommends]` installs Debian's PACKAGE
# (as root, or through sudo; its recommended packages too with `recommends`), or says how to when apt-get
# is not there. NAME prefixes the messages.
apt_install() {
    local name="$1" package="$2" why="$3" only="--no-install-recommends"
    if [ "${4:-}" = "recommends" ]; then
        only=""
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$name: install $package with your package manager ($why)" >&2
        exit 1
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    echo "$name: installing Debian's $package package" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $only "$package" >/dev/null
}
