"""Docker labels: the record of what exists.

Every container and network of a session carries these labels; placement, idempotency,
listing and destroy read them back from the engines. The only other state is the
session ledger (module_utils/scheduling/ledger/document.py), which concurrent creates agree through.
Modules, filters, the CLI and the tests import the names from here.
"""

from __future__ import annotations

PREFIX = "ai.backend.cluster."

# Backend.AI's own cluster labels.
LABEL_SESSION = PREFIX + "session"
LABEL_SESSION_ID = PREFIX + "session-id"
LABEL_ROLE = PREFIX + "role"
LABEL_IDX = PREFIX + "idx"
LABEL_HOST = PREFIX + "host"
LABEL_KERNEL_ID = PREFIX + "kernel-id"

# The toolkit's: what idempotency and placement need to read back from Docker.
LABEL_SPEC_HASH = PREFIX + "spec-hash"
LABEL_MODE = PREFIX + "mode"
LABEL_CPU = PREFIX + "cpu"
LABEL_MEM = PREFIX + "mem"
LABEL_GPU = PREFIX + "gpu"
LABEL_RESOURCE_GROUP = PREFIX + "resource-group"
# Number of containers of the session (list and completeness checks read it back).
LABEL_SIZE = PREFIX + "size"
# main1's: the session's own apps (session_apps), in the image label's form
# (name:protocol:port,...); the image's own apps are on the image (ai.backend.service-ports).
LABEL_APPS = PREFIX + "apps"
# The inventory name of the agent a container was placed on (a name only: listing shows
# it; what counts capacity is LABEL_AGENT_ID).
LABEL_AGENT = PREFIX + "agent"
# The identity of that agent, from the cluster (scheduling/placement/admission.py): its engine's
# Swarm node ID or engine ID, with "/SLOT" for a declared bai_agent_id. Admission counts
# an engine's containers by it.
LABEL_AGENT_ID = PREFIX + "agent-id"
# The identity of the session ledger that counts the container's session: the swarm's
# cluster ID, or a file ledger's id (PATH.id). An agent refuses sessions while it runs
# ones another ledger counts (module_utils/scheduling/placement/admission.py, foreign).
LABEL_LEDGER = PREFIX + "ledger"
# Device indices a container holds, comma-joined ("0,1"); empty or absent: none.
LABEL_GPU_DEVICES = PREFIX + "gpu-devices"
# Batch sessions (module_utils/jobs/job.py): "main" on main1, which runs the command, "member"
# on the others; absent on an interactive session's containers.
LABEL_BATCH = PREFIX + "batch"
# Who holds the session (session_owner; scheduling/queue/policies.py): list shows it, and a
# ledger rebuilt from the labels gets each session's owner back. Absent on sessions made
# before owners existed.
LABEL_OWNER = PREFIX + "owner"
# Seconds the session may run from when it was placed (session_lifetime_s, or the owner's
# longest under bai_session_policies); absent: no limit. Reconcile ends it when it is up.
LABEL_LIFETIME = PREFIX + "lifetime-s"
# When it ends (epoch seconds, the ledger's clock): placed + lifetime; also the containers'
# BACKENDAI_SESSION_DEADLINE. A ledger rebuilt from the labels keeps it.
LABEL_DEADLINE = PREFIX + "deadline"
# The warning before the end (session_end_signal): "USR1@300".
LABEL_END_SIGNAL = PREFIX + "end-signal"
# A batch session that may restart (session_restarts): how many times its gang started
# again before this attempt ("0" for the first); also BACKENDAI_SESSION_RESTART_COUNT.
LABEL_RESTART_COUNT = PREFIX + "restart-count"
