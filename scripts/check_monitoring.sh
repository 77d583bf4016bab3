#!/usr/bin/env bash
# The monitoring files checked with the Prometheus project's own promtool (make lint):
# the alert rules (check rules), their unit tests (test rules), the metrics' text as the
# housekeeping pass writes it, from a sample cluster (check metrics: names, types,
# units), the Grafana dashboard's queries (parsed as recording rules), and a Prometheus
# configuration as roles/monitoring writes it (check config, the rules included).
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
# roles/monitoring's prometheus.yml for the lab's addresses, through the role's filter.
config=$(mktemp /tmp/bai-prometheus.XXXXXX.yml)
trap 'rm -f "$queries" "$config"' EXIT
"$ROOT/.venv/bin/python" - "$config" "$ROOT/monitoring/bai_cluster.rules.yml" <<'PY'
import sys
import yaml
from ansible_collections.bai.cluster.plugins.filter.bai_metrics import prometheus_config
lab = {"manager": ["10.210.2.11", "10.210.3.11"], "agent1": ["10.210.3.21"]}
made = prometheus_config(lab, ["manager", "agent1"], "manager",
                         zone_cidrs={"management": "10.210.2.0/24", "compute": "10.210.3.0/24"},
                         groups={"manager": ["manager"], "agents": ["agent1"]},
                         group_order=["manager", "agents"], extra_targets=["controller:9100"],
                         rule_files=[sys.argv[2]])
assert not made["problems"], made
yaml.safe_dump(made["config"], open(sys.argv[1], "w"), sort_keys=False)
PY
"$PROMTOOL" check config "$config" >/dev/null
echo "check_monitoring: rules, their tests, the dashboard's queries, the metrics' text and the role's configuration pass promtool"
