# Talks the agents' peer protocol (agent/peer.h) to the agent at 127.0.0.1:PORT the way another
# user could: with the caller's own MUNGE credential, with none, and with a forged one. Each try
# asks for SHARD whole (kGetShard), or without SHARD for one file (kGet of shard 0, entry 0).
# Usage: peer_probe.py PORT [SHARD]; prints one line per try (status, bytes received).
import socket, struct, subprocess, sys
port = int(sys.argv[1])
REQ = struct.Struct('<IIIII'); REP = struct.Struct('<IIiIQ'); MAGIC = 0x31505346
request = REQ.pack(MAGIC, 3, int(sys.argv[2]), 0, 0) if len(sys.argv) > 2 else REQ.pack(MAGIC, 2, 0, 0, 0)
def talk(msgs):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(1.5)  # a served connection stays open: stop reading when it goes quiet
    for m in msgs: s.sendall(m)
    data = b''
    try:
        while True:
            c = s.recv(65536)
            if not c: break
            data += c
    except OSError:
        pass
    return data
def status(r):
    return REP.unpack(r[:REP.size])[2] if len(r) >= REP.size else None
cred = subprocess.run(["munge", "-n"], capture_output=True, check=True).stdout.strip()
r = talk([REQ.pack(MAGIC, 1, 0, 0, len(cred)) + cred, request])
print("own credential: status", status(r), "bytes after", max(0, len(r) - REP.size))
print("no credential: bytes", len(talk([request])))
r = talk([REQ.pack(MAGIC, 1, 0, 0, 10) + b"garbage!!!", request])
print("forged credential: status", status(r), "bytes", len(r))
