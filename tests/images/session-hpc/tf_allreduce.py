"""All-reduce across the session with TensorFlow's MultiWorkerMirroredStrategy (CPU).

Started once on every container (over SSH from main1); configured by nothing but the
TF_CONFIG the toolkit injected: the cluster's workers (host:port, one port per rank) and
this container's task index. Each worker contributes index+1; every worker must end with
sum(1..workers). Prints one line per worker for the test to check.
"""

import json
import os
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # after the log level is set

config = json.loads(os.environ["TF_CONFIG"])
index = config["task"]["index"]
workers = len(config["cluster"]["worker"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()


@tf.function
def step():
    context = tf.distribute.get_replica_context()
    return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(float(index + 1)))


total = float(strategy.experimental_local_results(strategy.run(step))[0].numpy())
expected = workers * (workers + 1) / 2
print(
    f"rank={index} workers={workers} host={socket.gethostname()} "
    f"sum={total:.0f} ok={total == expected}",
    flush=True,
)
