#!/bin/bash
# Several nodes on one machine: K network + UTS namespaces (hostnames node1..nodeK, addresses 10.199.39.K),
# one veth each into a bridge in a namespace of its own, each node's egress shaped by tc netem.
#
#   sudo scripts/cluster-local.sh up --nodes 2 --rate 1gbit --delay 100us [--loss 0.1] [--ssh] [--slurm]
#   sudo scripts/cluster-local.sh link --rate 100mbit --delay 1ms [--node 2]   # reshape a running cluster
#   sudo scripts/cluster-local.sh status                                      # exit 0 when up and shaped
#   sudo scripts/cluster-local.sh down                                        # remove everything it made
#
# The state file (/run/distbench-cluster/state.json, or $DISTBENCH_CLUSTER_DIR) records the nodes and their
# links; `distbench comm --nodes` and `distbench scale --nodes` run across the nodes when it exists.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${DISTBENCH_PYTHON:-$(command -v python3)}
[[ -x $HERE/.venv/bin/python ]] && [[ -z ${DISTBENCH_PYTHON:-} ]] && PY=$HERE/.venv/bin/python
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m distbench.cluster "$@"
