"""Helper run inside a namespace by test_delayline: send or receive numbered UDP datagrams."""

import socket
import sys
import time

mode, addr, port, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if mode == "send":
    gap = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    for i in range(count):
        s.sendto(i.to_bytes(4, "big") + b"x" * 1000, (addr, port))
        if gap:
            time.sleep(gap)
else:
    s.bind((addr, port))
    s.settimeout(float(sys.argv[5]) if len(sys.argv) > 5 else 3.0)
    print("listening", flush=True)
    got = []
    try:
        while len(got) < count:
            got.append(int.from_bytes(s.recv(2048)[:4], "big"))
    except TimeoutError:
        pass
    print(" ".join(map(str, got)))
