#!/usr/bin/env python3
# What TLS clients offer a port, read off the wire: a packet socket (AF_PACKET,
# every frame the interface sends or receives) on one interface, each TCP flow
# to the port put back together from its SYN until its first TLS record is
# whole, then that record's ClientHello read: the server name (SNI) and the ALPN
# protocols offered. One JSON line per connection:
#
#   {"src": "198.18.0.1:40112", "dst": "198.18.0.12:8443", "sni": "name.ns.svc", "alpn": ["http/1.1"]}
#
# ("sni"/"alpn": null when the ClientHello has no such extension). Runs until
# killed. Needs root (CAP_NET_RAW). Used by test/node/webhook-chart.ts: with the
# real kube-proxy the API server's connections to a Service are NAT'd by the
# kernel, and no proxy of the test sees their bytes.
#
#   python3 clienthello.py <interface> <tcp port>
import json
import socket
import struct
import sys

ETH_P_ALL = 0x0003
iface, port = sys.argv[1], int(sys.argv[2])
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
sock.bind((iface, 0))
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
print(json.dumps({"listening": iface, "port": port}), flush=True)

# flow -> [initial sequence number + 1, {offset: bytes}]
flows = {}
done = set()


def u16(b, at):
    return struct.unpack_from("!H", b, at)[0]


def client_hello(record):
    """The SNI and the ALPN list of a TLS record holding a ClientHello (RFC 8446 4.1.2, RFC 6066 3, RFC 7301)."""
    if len(record) < 43 or record[0] != 0x16 or record[5] != 0x01:
        return None
    at = 43
    at += 1 + record[at]  # session id
    at += 2 + u16(record, at)  # cipher suites
    at += 1 + record[at]  # compression methods
    end = at + 2 + u16(record, at)
    at += 2
    sni = alpn = None
    while at + 4 <= min(end, len(record)):
        kind, length = u16(record, at), u16(record, at + 2)
        data = record[at + 4 : at + 4 + length]
        if kind == 0 and len(data) >= 5:  # server_name: list length, type 0 (host_name), name length, name
            sni = data[5 : 5 + u16(data, 3)].decode("ascii", "replace")
        elif kind == 16 and len(data) >= 2:  # ALPN: list length, then length-prefixed names
            alpn, p = [], 2
            while p < 2 + u16(data, 0) and p < len(data):
                alpn.append(data[p + 1 : p + 1 + data[p]].decode("ascii", "replace"))
                p += 1 + data[p]
        at += 4 + length
    return sni, alpn


while True:
    frame = sock.recv(1 << 17)
    if len(frame) < 14 + 20 or u16(frame, 12) != 0x0800:
        continue
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] != 6 or len(ip) < ihl + 20:
        continue
    total = u16(ip, 2)
    tcp = ip[ihl:total]
    sport, dport, seq = struct.unpack_from("!HHI", tcp, 0)
    if dport != port:
        continue
    flags = tcp[13]
    src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
    flow = (src, sport, dst, dport)
    if flags & 0x02:  # SYN (a new connection, maybe on a port used before)
        flows[flow] = [(seq + 1) & 0xFFFFFFFF, {}]
        done.discard(flow)
        continue
    payload = tcp[(tcp[12] >> 4) * 4 :]
    if flow in done or flow not in flows or not payload:
        continue
    isn, chunks = flows[flow]
    chunks[(seq - isn) & 0xFFFFFFFF] = payload
    data = b""
    while len(data) in chunks:
        data += chunks[len(data)]
    if len(data) < 5 or len(data) < 5 + u16(data, 3):
        if len(data) > 1 << 16:
            del flows[flow]
        continue
    del flows[flow]
    done.add(flow)
    hello = client_hello(data[: 5 + u16(data, 3)])
    if hello:
        print(json.dumps({"src": f"{src}:{sport}", "dst": f"{dst}:{dport}", "sni": hello[0], "alpn": hello[1]}), flush=True)
