"""The bottleneck: one device in one namespace with the shaper + bfifo tree on its egress.

It owns what callers used to pass around as (namespace, device, handle): changing the buffer in
place, reading the device's counters and the buffer's statistics, and knowing which qdisc counters
are the buffer's own drops. Monitors and experiments ask it; only bufsize.topologies.shaper knows the tree.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from bufsize.topologies import FRAME_BYTES, netns, shaper
from bufsize.topologies.counters import InterfaceCounters
from bufsize.topologies.errors import RunError
from bufsize.topologies.proc import run
from bufsize.topologies.qdisc_stats import QdiscReader
from bufsize.topologies.units import check_buffer_bytes


@dataclass
class Bottleneck:
    ns: str
    dev: str
    shaper: str  # htb | tbf
    rate_mbps: float
    burst_bytes: int
    buffer_bytes: int
    kick_filter: bool = False  # the pacer's: HTB steals kick frames (shaper.build_commands)

    leaf_handle = shaper.tc_handle(shaper.LEAF)
    class_handle = shaper.tc_handle(shaper.CLASS)
    root_handle = shaper.tc_handle(shaper.ROOT)

    def commands(self) -> list[str]:
        """`tc -batch` lines that build it (run in its namespace)."""
        return shaper.build_commands(
            self.dev, self.shaper, self.rate_mbps, self.buffer_bytes, self.burst_bytes, self.kick_filter
        )

    def kick_socket(self) -> socket.socket:
        """A packet socket on the device, for the delay line's pacer (bsz-delayline -k FD).

        Made here, in the bottleneck's namespace: the delay line runs in its own, where the
        device's name means nothing; the socket keeps the namespace it was made in."""
        if not self.kick_filter:
            raise ValueError("kicks without the kick filter would be queued and sent")
        with netns.entered(self.ns):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(shaper.KICK_ETHERTYPE))
        try:
            sock.bind((self.dev, shaper.KICK_ETHERTYPE))  # the name resolves in the socket's namespace
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, FRAME_BYTES)  # it never receives
        except BaseException:
            sock.close()
            raise
        return sock

    def set_buffer(self, buffer_bytes: int) -> None:
        """Change the bfifo limit in place; nothing else in the tree is touched."""
        check_buffer_bytes(buffer_bytes)
        run(shaper.change_buffer_argv(self.ns, self.dev, buffer_bytes))
        self.buffer_bytes = buffer_bytes

    def counters(self) -> InterfaceCounters:
        """A reader of the device's byte and packet counters (close it when done)."""
        return InterfaceCounters(self.ns, self.dev)

    def leaf_reader(self) -> QdiscReader:
        """A reader of the buffer's backlog, drops and limit, one netlink request per read (close it)."""
        return QdiscReader(self.ns, self.dev, self.leaf_handle, self.class_handle)

    def leaf_drops(self) -> int:
        """Packets the buffer has dropped since it was made."""
        try:
            reader = self.leaf_reader()
        except (OSError, LookupError) as e:
            raise RunError(f"the bottleneck {self.dev} in {self.ns} cannot be read: {e}") from e
        with reader as r:
            return r.read().drops

    def qdisc_label(self, handle: int, kind: str) -> str:
        return f"qdisc {kind} {handle >> 16:x}:"

    def own_drop_labels(self) -> set[str]:
        """Labels (as bufsize.monitors.drops names qdiscs) of the counters that count the buffer's drops:
        the leaf, and the shaper's root, which counts its child's drops again."""
        return {self.qdisc_label(self.leaf_handle, "bfifo"), self.qdisc_label(self.root_handle, self.shaper)}
