#!/bin/sh
# Copies the agent's run-time files out of a Debian build stage into one directory (Dockerfile.agent's last stage is
# FROM scratch + that directory): node, the tools the agent runs in the pod's netns, the libraries they load, and the
# few /etc files they read. Nothing else: no apt/dpkg, perl, docs or locales. Usage: agent-rootfs.sh ROOT BINARY...
set -eu
root=$1
shift
mkdir -p "$root"
# Debian 12 has merged /usr: keep its top-level links so /bin/sh and /lib64/ld-linux-x86-64.so.2 resolve as there.
for dir in bin lib lib64 sbin; do ln -sfn "usr/$dir" "$root/$dir"; done
mkdir -p "$root/usr/bin" "$root/usr/lib" "$root/usr/lib64" "$root/usr/sbin" "$root/etc" "$root/run" "$root/root"
mkdir -p -m 1777 "$root/tmp" "$root/var/tmp"
ln -sfn ../run "$root/var/run"

# Copies one path as it is in this stage (a symlink stays a symlink, and what it points to is copied too), under its
# physical directory so /lib/x/… lands in usr/lib/x/… behind the links above.
copy() {
  src=$1
  [ -e "$src" ] || [ -L "$src" ] || { echo "agent-rootfs: $src is missing in the build stage" >&2; exit 1; }
  dir=$(cd "$(dirname "$src")" && pwd -P)
  path="$dir/$(basename "$src")"
  [ -e "$root$path" ] || [ -L "$root$path" ] && return 0
  cp -a --parents "$path" "$root"
  if [ -L "$path" ]; then
    target=$(readlink "$path")
    case $target in /*) ;; *) target="$dir/$target" ;; esac
    copy "$target"
  fi
}

# Each program with the shared libraries the loader finds for it (ldd: the same search the runtime does).
for bin in "$@"; do
  copy "$bin"
  for lib in $(ldd "$(readlink -f "$bin")" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
    copy "$lib"
  done
done

# iptables loads its match/target extensions (comment, REDIRECT, tcp …) with dlopen, which ldd does not see.
for ext in /usr/lib/x86_64-linux-gnu/xtables/*.so; do
  copy "$ext"
  for lib in $(ldd "$ext" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'); do copy "$lib"; done
done

# passwd/group: names for the ids the agent's processes run as; protocols/services: iptables and ss name
# protocols and ports; ld.so.conf: the loader cache below.
for f in /etc/passwd /etc/group /etc/nsswitch.conf /etc/protocols /etc/services /etc/ethertypes /etc/ld.so.conf; do
  copy "$f"
done
cp -a /etc/ld.so.conf.d "$root/etc/"
ldconfig -r "$root"
