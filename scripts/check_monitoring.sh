#!/usr/bin/env bash
# The monitoring files checked with the Prometheus project's own promtool (make lint):
# the alert rules (check rules), their unit tests (test rules), the metrics' text as the
# housekeeping pass writes it, from a sample cluster (check metrics: names, types,
# units), and the Grafana dashboard's queries (parsed as recording rules).
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
# Every query of the dashboard, as PromQL promtool parses: each one a recording rule.
queries=$(mktemp /tmp/bai-dashboard-rules.XXXXXX.yml)
trap 'rm -f "$queries"' EXIT
"$ROOT/.venv/bin/python" - "$queries" <<'PY'
import json, sys
import yaml
panels = json.load(open("bai_cluster.dashboard.json"))["panels"]
rules = [
    {"record": f"dashboard:panel{p['id']}:{t['refId']}", "expr": t["expr"]}
    for p in panels
    for t in p["targets"]
]
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(sys.argv[1], "w"))
PY
"$PROMTOOL" check rules "$queries" >/dev/null
echo "check_monitoring: rules, their tests, the dashboard's queries and the metrics' text pass promtool"
