"""``bai-cluster`` on a login host: users run it as themselves (user.py), it re-executes
through one sudo rule as the cluster's service account (service.py), whose gate (gate.py)
says who asks and what they may ask."""
