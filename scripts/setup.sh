#!/usr/bin/env bash
# Installs what devop's stand-in cluster, tests and benchmarks need on a Debian/Ubuntu machine (as root), then the npm
# packages and the bundles. Safe to run again: it skips what is already there. Used by .ci/run and `npm run demo`.
set -euo pipefail
cd "$(dirname "$0")/.."

# iptables and ip6tables (nft + legacy) and nftables (the agent's kernel-owned rule table), iproute2 (ip netns, veth, bridge), conntrack (flush on steal), util-linux (nsenter),
# gcc + libc6-dev (cc: the agent's packet capture, agent/native/capture.c, and the benchmarks' C references), openssh (the tunnel benchmark's baseline), wrk (bench:load's load), tmux (the terminal UI
# test), curl (outgoing proxy tests), bind9-dnsutils (dig: a program's own DNS queries under the shim), openssl (the
# stand-in's CA), procps (ps/pkill in tests), python3-kubernetes (the
# official Python client, one of the clients nobody here wrote that check the stand-in); containerd + runc (the
# stand-in's kubelet runs containers), buildah + mmdebstrap (`npm run images` builds the images from the Dockerfiles).
packages=(iptables nftables iproute2 conntrack util-linux gcc libc6-dev openssh-server openssh-client wrk tmux curl bind9-dnsutils procps ca-certificates openssl
  python3-kubernetes containerd runc buildah mmdebstrap)
commands=(iptables ip6tables-nft ip6tables-legacy nft ip conntrack nsenter cc sshd ssh wrk tmux curl dig ps openssl containerd ctr runc buildah mmdebstrap)
missing=0
for c in "${commands[@]}"; do command -v "$c" >/dev/null 2>&1 || missing=1; done
# A cc without libc6-dev (gcc only recommends it) cannot link the agent's capture statically: install it then too.
/usr/bin/python3 -c 'import kubernetes' >/dev/null 2>&1 || missing=1
if [ "$missing" = 0 ] && ! printf 'int main(void){return 0;}\n' | cc -static -x c -o /dev/null - >/dev/null 2>&1; then
  missing=1
fi
if [ "$missing" = 1 ] || [ "${DEVOP_SETUP_FORCE_APT:-0}" = 1 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "devop setup: system packages are missing (${packages[*]}); run as root (the stand-in makes network namespaces)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
node scripts/build.mjs

# The OCI images the stand-in's containers run (dist/images); a rerun keeps every archive whose inputs did not change.
if [ "$(id -u)" = 0 ]; then
  node scripts/images.mjs
else
  echo "devop setup: not root, so no images were built (npm run images needs root for buildah)" >&2
fi
