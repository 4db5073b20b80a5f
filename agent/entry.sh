#!/bin/sh
# The agent image's entry point. In job mode the agent has to live in the target pod's network namespace: this script
# finds the target's PID (or, when it cannot, the agent does in a short first run that says why), then nsenter
# replaces this shell with the agent inside that netns — one resident process, as in the other modes (docs/agent.md).
set -e
node='node --max-semi-space-size=1 --lite-mode /opt/devop/agent.js'
# The Node PID lookup runs for a moment: Node's defaults, under which Node's own modules load from the code cache built
# into its binary (the agent's memory flags turn that off).
lookup='node /opt/devop/agent.js'
# The guard of a --replace session (a Job of its own): no netns to enter.
if [ "${1:-}" = guard ]; then exec $node guard; fi
# The target's PID as agent/target-pid.ts finds it (the lowest PID whose /proc/PID/cgroup names the container), with
# the shell's builtins only: a Node run for it cost a whole Node start (0.1 s idle, over 1 s on a busy node) before
# the agent's own. Prints nothing when the ID is not bare hex or no process matches: the Node run then says why.
find_target_pid() {
  id=${DEVOP_AGENT_CONTAINER_ID:-}
  id=${id##*://}
  case $id in '' | *[!0-9a-f]*) return 0 ;; esac
  [ ${#id} -ge 12 ] || return 0
  best=
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [ "$pid" != $$ ] || continue
    if [ -n "$best" ] && [ "$pid" -ge "$best" ]; then continue; fi
    { while IFS= read -r line; do
      case $line in *"$id"*) best=$pid; break ;; esac
    done <"$dir/cgroup"; } 2>/dev/null || : # the process ended while we scanned
  done
  printf '%s' "$best"
}
if [ "${DEVOP_AGENT_MODE:-job}" = job ] && [ -z "${DEVOP_AGENT_TARGET_PID:-}" ]; then
  out=$(find_target_pid)
  # The Node run also checks the capabilities nsenter needs: it runs when the shell found nothing or cannot enter. The
  # probe runs cat, a program the image holds (`true` is only a shell builtin, which nsenter cannot exec).
  if [ -z "$out" ] || ! nsenter -t "$out" -n -- cat /dev/null 2>/dev/null; then
    # On failure that run's output is its one-line error (or the bad-configuration line): pass it on to the log.
    if ! out=$($lookup --target-pid); then printf '%s\n' "$out"; exit 1; fi
  fi
  DEVOP_AGENT_TARGET_PID=$out
  export DEVOP_AGENT_TARGET_PID DEVOP_AGENT_IN_NETNS=true
  exec nsenter -t "$DEVOP_AGENT_TARGET_PID" -n -- $node
fi
exec $node
