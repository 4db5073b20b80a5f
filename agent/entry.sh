#!/bin/sh
# The agent image's entry point. In job mode the agent has to live in the target pod's network namespace: the agent
# itself finds the target's PID (and checks its capabilities) in a short first run, then nsenter replaces this shell
# with the agent inside that netns — one resident process, as in the other modes (docs/agent.md).
set -e
node='node --max-semi-space-size=1 --lite-mode /opt/devop/agent.js'
# The PID lookup runs for a moment: Node's defaults, under which Node's own modules load from the code cache built into
# its binary (the agent's memory flags turn that off).
lookup='node /opt/devop/agent.js'
# The guard of a --replace session (a Job of its own): no netns to enter.
if [ "${1:-}" = guard ]; then exec $node guard; fi
if [ "${DEVOP_AGENT_MODE:-job}" = job ] && [ -z "${DEVOP_AGENT_TARGET_PID:-}" ]; then
  # On failure that run's output is its one-line error (or the bad-configuration line): pass it on to the log.
  if ! out=$($lookup --target-pid); then printf '%s\n' "$out"; exit 1; fi
  DEVOP_AGENT_TARGET_PID=$out
  export DEVOP_AGENT_TARGET_PID DEVOP_AGENT_IN_NETNS=true
  exec nsenter -t "$DEVOP_AGENT_TARGET_PID" -n -- $node
fi
exec $node
