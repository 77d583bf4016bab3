"""Stand-in listeners for a lab node's component ports.

Usage: python3 lab-listen.py 8080/tcp 10205-10300/tcp 4789/udp ...
(lab-entrypoint.sh starts it from /usr/local/lib/bai-lab/ with the node's LAB_LISTEN.)
Every TCP connection gets one line "bai-lab <hostname> <port>"; every UDP datagram
is answered with the same line. Reachability tests read that line to prove which
listener they reached.
"""

import asyncio
import socket
import sys


def parse(specs: list[str]) -> list[tuple[int, str]]:
    ports = []
    for spec in specs:
        rng, _sep, proto = spec.partition("/")
        lo, _sep, hi = rng.partition("-")
        for port in range(int(lo), int(hi or lo) + 1):
            ports.append((port, proto or "tcp"))
    return ports


class Udp(asyncio.DatagramProtocol):
    def __init__(self, port: int) -> None:
        self.port = port

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:  # type: ignore[override]
        self.transport.sendto(banner(self.port), addr)


def banner(port: int) -> bytes:
    return f"bai-lab {socket.gethostname()} {port}\n".encode()


async def main() -> None:
    loop = asyncio.get_running_loop()
    for port, proto in parse(sys.argv[1:]):
        if proto == "udp":
            await loop.create_datagram_endpoint(lambda p=port: Udp(p), ("0.0.0.0", port))
        else:

            async def handle(reader, writer, p=port):
                writer.write(banner(p))
                await writer.drain()
                writer.close()

            await asyncio.start_server(handle, "0.0.0.0", port)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
