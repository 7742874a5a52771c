# Another user's attacks on the agents' peer service (agent/peer_wire.h), run as that user.
#   peer_probe.py ADDR:PORT RANK [SHARD]   talks to the agent of RANK at ADDR:PORT
#   peer_probe.py --listen ADDR:PORT SECS  plays a dead agent: binds its endpoint, answers every
#                                          hello with the caller's own credential, and reports
#                                          what the job's agents sent
# Prints one line per try; every line names the outcome the test asserts.
import socket, struct, subprocess, sys, time

HDR = struct.Struct('<IIIIQ')
MAGIC, HELLO, AUTH, GET, GETSHARD = 0x32505346, 1, 2, 3, 4


def munge(payload=b''):
    return subprocess.run(["munge", "-s", payload.decode() or "x"], capture_output=True, check=True).stdout.strip()


def connect(ep):
    host, port = ep.rsplit(':', 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    return s


def drain(s, quiet=1.5):
    s.settimeout(quiet)
    data = b''
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            data += c
    except OSError:
        pass
    return data


def hello(s, rank):
    s.sendall(HDR.pack(MAGIC, HELLO, 0, rank, 32) + b'n' * 32)
    s.settimeout(5)
    head = b''
    while len(head) < HDR.size:
        c = s.recv(HDR.size - len(head))
        if not c:
            return None, b''
        head += c
    _, _, status, _, n = HDR.unpack(head)
    body = b''
    while len(body) < n:
        c = s.recv(n - len(body))
        if not c:
            break
        body += c
    return status, body


def attack(ep, rank, shard):
    get = HDR.pack(MAGIC, GETSHARD, shard, 0, 0) + b't' * 16 if shard is not None else HDR.pack(MAGIC, GET, 0, 0, 0) + b't' * 16
    # 1. The server's proof: a credential only the job's user can decode.
    s = connect(ep)
    status, body = hello(s, rank)
    cred = body[32:]
    r = subprocess.run(["unmunge"], input=cred, capture_output=True)
    print("decode the server's proof: exit", r.returncode, (r.stderr.decode().strip() or "decoded").replace('\n', ' '))
    # 2. Our own valid MUNGE credential (any payload): refused, and nothing follows.
    s.sendall(HDR.pack(MAGIC, AUTH, 0, rank, len(munge())) + munge() + get)
    r = drain(s)
    st = HDR.unpack(r[:HDR.size])[2] if len(r) >= HDR.size else None
    print("own credential: status", st, "bytes after", max(0, len(r) - HDR.size))
    # 3. No credential at all: a request straight away.
    s = connect(ep)
    s.sendall(get)
    print("no credential: bytes", len(drain(s)))
    # 4. A forged credential.
    s = connect(ep)
    hello(s, rank)
    s.sendall(HDR.pack(MAGIC, AUTH, 0, rank, 10) + b"garbage!!!" + get)
    r = drain(s)
    st = HDR.unpack(r[:HDR.size])[2] if len(r) >= HDR.size else None
    print("forged credential: status", st, "bytes after", max(0, len(r) - HDR.size))
    # 5. A 4 GiB length before any authentication (F2).
    s = connect(ep)
    s.sendall(HDR.pack(MAGIC, HELLO, 0, rank, 0xffffffff))
    print("4 GiB length: bytes", len(drain(s)))
    # 6. Slow-loris and flood (F3, F10): many connections, one byte each.
    held = []
    for _ in range(200):
        try:
            c = connect(ep)
            c.sendall(b'F')
            held.append(c)
        except OSError:
            break
    time.sleep(6.5)  # past the server's handshake deadline
    closed = 0
    for c in held:
        c.settimeout(0.2)
        try:
            closed += c.recv(1) == b''
        except ConnectionResetError:  # closed with our byte unread
            closed += 1
        except OSError:
            pass
    print("slow connections: opened", len(held), "closed by the agent", closed)


def fake_server(ep, secs):
    host, port = ep.rsplit(':', 1)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # The dead agent's connections may hold the port for a moment (FIN_WAIT): keep trying.
    t0 = time.time()
    while True:
        try:
            ls.bind((host, int(port)))
            break
        except OSError:
            if time.time() - t0 > 60:
                raise
            time.sleep(0.2)
    print("fake server: bound %s after %.1f s" % (ep, time.time() - t0), flush=True)
    ls.listen(64)
    ls.settimeout(0.5)
    conns = hellos = creds = 0
    end = time.time() + secs
    while time.time() < end:
        try:
            c, _ = ls.accept()
        except OSError:
            continue
        conns += 1
        c.settimeout(2)
        try:
            head = c.recv(HDR.size, socket.MSG_WAITALL)
            if len(head) == HDR.size and HDR.unpack(head)[1] == HELLO:
                hellos += 1
                c.recv(32, socket.MSG_WAITALL)
                mine = munge()
                c.sendall(HDR.pack(MAGIC, HELLO, 0, HDR.unpack(head)[3], 32 + len(mine)) + b's' * 32 + mine)
                more = drain(c, 1.0)
                creds += len(more) >= HDR.size and HDR.unpack(more[:HDR.size])[1] == AUTH
        except OSError:
            pass
        c.close()
    print("fake server: connections", conns, "hellos", hellos, "credentials received", creds)


if sys.argv[1] == '--listen':
    fake_server(sys.argv[2], float(sys.argv[3]))
else:
    attack(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
