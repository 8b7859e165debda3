"""TCP transport of the transfer agent (connectors without a transport pdctl can drive, and
the side channel of the others): the sender writes whole buffers on one TCP connection and
waits for the listener's acknowledgement of each, so a timed buffer has really arrived."""

from __future__ import annotations

import struct

from agent import Failed, connect, listen, measure

PATTERN = 0xA5
END = struct.pack("!Q", 0)


def _recv_into(sock, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise Failed("transfer", "the sender closed the connection mid-buffer", "EPIPE")
        got += n


def run(a) -> dict:
    if a.side == "listen":
        ch, peer = listen(a.bind, a.port, a.seconds + 20)
        buf = bytearray(a.buffer)
        view, received, verified = memoryview(buf), 0, True
        while True:
            size = struct.unpack("!Q", ch.exact(8))[0]
            if size == 0:
                break
            if size > len(buf):
                raise Failed("transfer", f"the sender sent {size} bytes, buffer {len(buf)}")
            _recv_into(ch.sock, view[:size])
            verified = verified and buf[0] == PATTERN and buf[size - 1] == PATTERN
            received += size
            ch.sock.sendall(struct.pack("!Q", received))
        result = ch.recv()
        return {**result, "received": received, "verified": verified, "peer": peer}
    ch = connect(a.to, a.port, 20.0)
    payload = memoryview(bytes([PATTERN]) * a.buffer)

    def post(size: int) -> None:
        ch.sock.sendall(struct.pack("!Q", size))
        ch.sock.sendall(payload[:size])
        ch.exact(8)

    result = measure(post, a.buffer, a.bytes, a.seconds)
    ch.sock.sendall(END)
    ch.send(**result)
    return result
