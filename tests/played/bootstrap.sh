#!/bin/sh
# OpenSandbox's bootstrap.sh, played (no registry serves the execd image): what
# ../shared/reference/sandbox-work.md §1.5 records of components/execd/bootstrap.sh. It starts
# $EXECD (default /opt/opensandbox/execd) in the background, then runs the command (argv, else
# BOOTSTRAP_CMD, else a shell), waits on it and forwards TERM to it. The node tier's execd image
# (tests/cluster/up-node.sh) carries it beside osbx-played-execd, as /bootstrap.sh.
# Not played: execd's own flags and its environment file (EXECD_ENVS).
"${EXECD:-/opt/opensandbox/execd}" &
if [ $# -eq 0 ]; then
  if [ -n "${BOOTSTRAP_CMD:-}" ]; then set -- sh -c "$BOOTSTRAP_CMD"; else set -- sh; fi
fi
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM
wait "$child"
