#!/usr/bin/env bash
# The monitoring files checked with the Prometheus project's own promtool (make lint):
# the alert rules (check rules), their unit tests (test rules), and the metrics' text
# as the housekeeping pass writes it, from a sample cluster (check metrics: names,
# types, units).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROMTOOL="$ROOT/scripts/promtool.sh"
cd "$ROOT/monitoring"
"$PROMTOOL" check rules bai_cluster.rules.yml
"$PROMTOOL" test rules bai_cluster.rules.test.yml
"$ROOT/.venv/bin/python" - <<'PY' | "$PROMTOOL" check metrics
import sys
from ansible_collections.bai.cluster.plugins.filter.bai_metrics import metrics_text

agent = {"name": "a1", "group": "default", "availability": "active", "health": "ready",
         "in_service": True, "source": "engine", "sessions": ["s"],
         "offer": {"cpu": 8.0, "mem": 2**34, "gpu_devices": [0, 1]},
         "given_out": {"cpu": 2.0, "mem": 2**30, "gpu_devices": [1]}}
queue = [{"name": "q", "resource_group": "default", "owner": "u", "wait": "behind",
          "submitted_at": 900.0, "type": "batch"}]
ledger = {"ledger": {"sessions": {}}, "queue": queue, "ledger_bytes": 2000,
          "ledger_max_bytes": 1000000,
          "counters": {"ends": {"batch/failed": 2}, "restarts": {"lost": 1},
                       "wait": {"default": {"buckets": [1, 2], "sum": 7.5, "count": 3}},
                       "schedule": {"at": 990.0, "seconds": 0.01, "passes": 4}}}
sys.stdout.write(metrics_text(ledger, [agent], [], 1000.0, "prometheus"))
PY
echo "check_monitoring: rules, their tests and the metrics' text pass promtool"
