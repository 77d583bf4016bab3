#!/usr/bin/env bash
# 40 sessions of size 2 at once on this machine's engine (a scale check of single-agent sessions): creates
# them 8 at a time with playbooks/session_create.yml -i inventories/local (0.2 CPU, 128 MiB
# per container), checks that all 80 containers run on 40 distinct subnets, that ssh works
# in every session and that two sessions cannot reach each other, then destroys them all.
#   bash bench/forty_sessions.sh      (logs in $TMPDIR/bai-scale/)
set -u
cd "$(dirname "$0")/.." || exit 1
logs=${TMPDIR:-/tmp}/bai-scale
export logs
export PATH=$PWD/.venv/bin:$PATH
mk() { ansible-playbook -i inventories/local playbooks/session_create.yml -e session_name="$1" -e session_size=2 \
  -e '{"session_resources": {"cpu": 0.2, "mem": "128m"}}' > "$logs/$1.log" 2>&1 && echo "ok $1" || echo "FAILED $1"; }
rm_() { ansible-playbook -i inventories/local playbooks/session_destroy.yml -e session_name="$1" > "$logs/$1.rm.log" 2>&1 && echo "gone $1" || echo "FAILED-rm $1"; }
export -f mk rm_
mkdir -p "$logs"
start=$(date +%s.%N)
seq -f "sc%02g" 1 40 | xargs -P 8 -I{} bash -c 'mk {}' > "$logs/created.txt"
echo "created: $(grep -c '^ok' "$logs/created.txt") of 40"; grep -v '^ok' "$logs/created.txt"
end=$(date +%s.%N)
echo "create wall: $(echo "$end - $start" | bc) s"
echo "running containers of the 40: $(docker ps -q --filter label=ai.backend.cluster.session | xargs -r docker inspect -f '{{index .Config.Labels "ai.backend.cluster.session"}}' | grep -c '^sc[0-9][0-9]$')"
echo "their networks: $(docker network ls -q --filter name=bai-sc | wc -l)"
docker network ls -q --filter name=bai-sc | xargs docker network inspect -f '{{range .IPAM.Config}}{{.Subnet}}{{end}}' | sort -u | wc -l | sed 's/^/distinct subnets: /'
bad=0; for i in $(seq -f "%02g" 1 40); do out=$(docker exec -u work "bai-sc$i-sub1" ssh main1 'echo $BACKENDAI_CLUSTER_HOST' 2>&1); [ "$out" = main1 ] || { bad=$((bad+1)); echo "sc$i: $out"; }; done
echo "sub1 -> main1 ssh failures: $bad"
# isolation: sc01's main1 cannot reach sc02's main1 by address
ip2=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' bai-sc02-main1)
docker exec -u work bai-sc01-main1 bash -c "timeout 3 bash -c '</dev/tcp/$ip2/2200' && echo REACHED || echo isolated"
start=$(date +%s.%N)
seq -f "sc%02g" 1 40 | xargs -P 8 -I{} bash -c 'rm_ {}' > "$logs/destroyed.txt"
echo "destroyed: $(grep -c '^gone' "$logs/destroyed.txt") of 40"; grep -v '^gone' "$logs/destroyed.txt"
end=$(date +%s.%N)
echo "destroy wall: $(echo "$end - $start" | bc) s"
echo "left: containers $(docker ps -aq --filter name=bai-sc | wc -l), networks $(docker network ls -q --filter name=bai-sc | wc -l)"
