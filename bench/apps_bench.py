"""Time an app through the app proxy, as a user on the lab's `user` node sees it (docs/apps.md).

On the lab (up and converged, bai/session-apps on the agents), with a session of the apps
image that declares web=http:8000 (made here when missing, removed at the end unless
--keep):

  open      `bai-cluster session app NAME jupyter` to the first byte of JupyterLab's page
            (curl from the user node, the cluster's CA checked, following the link's
            redirect): cold (JupyterLab not running: the open starts it) and warm
  download  a file of --mb MB in main1, through its route (a small tornado server of the
            user's on the declared port 8000) vs `docker cp` of the same file on the agent
  websocket --ws WebSocket connections through the route at once (wss, the route's
            cookie), each echoing a message every 2 s for --hold seconds: how many
            dropped or lost a message

  .venv/bin/python bench/apps_bench.py [--ws 50] [--hold 60] [--mb 50] [--keep]

Prints one JSON object. Needs root (docker) on the controller; nothing is installed on
the lab's nodes (the client is Python's standard library, run by the user node's python3).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = REPO / ".venv" / "bin" / "bai-cluster"
NAME = "apps-bench"
CA = "/tmp/apps-bench-ca.pem"

# The user's own server in main1 (the apps image's tornado): files of ~work and an echo.
SERVER = r"""
import tornado.ioloop, tornado.web, tornado.websocket
class Echo(tornado.websocket.WebSocketHandler):
    def check_origin(self, origin):
        return True
    def on_message(self, message):
        self.write_message(message)
app = tornado.web.Application([
    (r"/echo", Echo),
    (r"/files/(.*)", tornado.web.StaticFileHandler, {"path": "/home/work"}),
])
app.listen(8000)
tornado.ioloop.IOLoop.current().start()
"""

# Run by the user node's python3: N wss connections through the route, each echoing.
CLIENT = r"""
import base64, json, os, socket, ssl, sys, threading, time
host, port, cookie, n, hold, ca = sys.argv[1:7]
port, n, hold = int(port), int(n), float(hold)
ctx = ssl.create_default_context(cafile=ca)
def recvn(s, k):
    data = b""
    while len(data) < k:
        chunk = s.recv(k - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data
def connect():
    s = ctx.wrap_socket(socket.create_connection((host, port), timeout=30), server_hostname=host)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /echo HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               f"Origin: https://{host}:{port}\r\nCookie: {cookie}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += recvn(s, 1)
    if b" 101 " not in head.split(b"\r\n")[0]:
        raise ConnectionError(head.split(b"\r\n")[0].decode())
    return s
def send(s, text):
    payload, mask = text.encode(), os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    s.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)
def recv(s):
    hdr = recvn(s, 2)
    return recvn(s, hdr[1] & 0x7F).decode()
results = [None] * n
def one(i):
    sent = echoed = 0
    try:
        s = connect()
        end = time.monotonic() + hold
        while time.monotonic() < end:
            text = f"ping {i} {sent}"
            send(s, text); sent += 1
            if recv(s) == text:
                echoed += 1
            time.sleep(2)
        results[i] = {"sent": sent, "echoed": echoed, "dropped": False}
    except Exception as exc:
        results[i] = {"sent": sent, "echoed": echoed, "dropped": True, "error": str(exc)}
threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps({"connections": n, "hold_s": hold,
                  "dropped": sum(r["dropped"] for r in results),
                  "messages": sum(r["sent"] for r in results),
                  "lost": sum(r["sent"] - r["echoed"] for r in results),
                  "errors": sorted({r.get("error", "") for r in results if r["dropped"]})}))
"""


def run(argv: list[str], stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        sys.exit(f"{' '.join(argv[:6])} failed: {done.stderr or done.stdout}")
    return done.stdout.strip()


def node(name: str, *argv: str, stdin: str | None = None, check: bool = True) -> str:
    return run(["docker", "exec", "-i", f"bai-lab-{name}", *argv], stdin, check)


def in_main1(agent: str, *argv: str, user: str = "work", detach: bool = False) -> str:
    flags = ["-d"] if detach else []
    return node(agent, "docker", "exec", *flags, "-u", user, f"bai-{NAME}-main1", *argv)


def cli(*argv: str) -> dict:
    return json.loads(run([str(CLI), "--quiet", "--json", *argv]))


def first_byte(url: str) -> float:
    """Seconds to the first byte of the page the link leads to (after its redirect)."""
    out = node(
        "user",
        "curl",
        "-sS",
        "--cacert",
        CA,
        "-L",
        "-c",
        "/tmp/apps-bench.jar",
        "-b",
        "/tmp/apps-bench.jar",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{time_starttransfer}",
        url,
    )
    code, seconds = out.split()
    assert code == "200", out
    return float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ws", type=int, default=50)
    parser.add_argument("--hold", type=float, default=60)
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    node("user", "sh", "-c", f"cat > {CA}", stdin=node("appproxy", "cat", "/etc/bai-ca/ca.pem"))
    made = cli(
        "session",
        "create",
        NAME,
        "-n",
        "2",
        "--mode",
        "multi-node",
        "--image",
        "bai/session-apps",
        "--mem",
        "5g",
        "--cpu",
        "0.5",
        "--app",
        "web=http:8000",
    )
    agent = made["ssh_agent"]
    result: dict = {"session": NAME, "agent": agent}
    try:
        in_main1(agent, "sh", "-c", "pkill -f [j]upyter-lab || true")
        for kind in ("cold", "warm"):
            began = time.monotonic()
            opened = cli("session", "app", NAME, "jupyter")
            cli_s = time.monotonic() - began
            page_s = first_byte(opened["url"])
            result[f"open_{kind}"] = {
                "started": opened["started"],
                "cli_s": round(cli_s, 2),
                "first_byte_s": round(page_s, 3),
                "total_s": round(cli_s + page_s, 2),
            }
        in_main1(
            agent,
            "dd",
            "if=/dev/urandom",
            "of=/home/work/big.bin",
            "bs=1M",
            f"count={args.mb}",
            "status=none",
        )
        in_main1(agent, "/opt/bai/apps/bin/python", "-c", SERVER, detach=True)
        time.sleep(1)
        web = cli("session", "app", NAME, "web")
        assert web["app"]["state"] == "running", web
        port = web["proxy_port"]
        token = web["url"].rsplit("bai_token=", 1)[1]
        out = node(
            "user",
            "curl",
            "-sS",
            "--cacert",
            CA,
            "-L",
            "-c",
            "/tmp/apps-bench-web.jar",
            "-b",
            "/tmp/apps-bench-web.jar",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{size_download} %{time_total}",
            web["url"].replace("/?", "/files/big.bin?"),
        )
        code, size, seconds = out.split()
        assert code == "200" and int(size) == args.mb << 20, out
        began = time.monotonic()
        node(agent, "docker", "cp", f"bai-{NAME}-main1:/home/work/big.bin", "/tmp/apps-bench.bin")
        cp_s = time.monotonic() - began
        node(agent, "rm", "-f", "/tmp/apps-bench.bin")
        result["download"] = {
            "mb": args.mb,
            "route_s": round(float(seconds), 2),
            "route_mb_s": round(args.mb / float(seconds), 1),
            "docker_cp_s": round(cp_s, 2),
        }
        address = web["url"].split("//", 1)[1].split(":", 1)[0]
        cookie = f"bai_route_{port}={token}"
        ws = node(
            "user",
            "python3",
            "-c",
            CLIENT,
            address,
            str(port),
            cookie,
            str(args.ws),
            str(args.hold),
            CA,
        )
        result["websocket"] = json.loads(ws)
    finally:
        if not args.keep:
            run([str(CLI), "--quiet", "session", "destroy", NAME], check=False)
        node("user", "rm", "-f", CA, "/tmp/apps-bench.jar", "/tmp/apps-bench-web.jar", check=False)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
