#!/usr/bin/env python3
"""Shows whether a NATS cluster's replicas stay in step across an expiry and a claim, the way
lease-nats uses a replicated bucket; exits 1 when they do not (see ci/cluster/nats.sh).

    python3 ci/cluster/nats-replica-check.py          # on ci/cluster/nats.sh's cluster, started if down

On a stream of its own (LEASE_REPLICA_CHECK: R3, file storage, max age 1 s, one message per
subject), three times: one follower is SIGKILLed; a message A is written to a key, expires on
the leader, and a claim B of the key (Nats-Expected-Last-Subject-Sequence: 0, as lease-nats
claims) is accepted; the follower is restarted and catches up. Then every node's last sequence
is compared, and the stream's leadership is moved to the node with the shortest stream, if one
is short, where one more claim shows which sequence it is given. Up to nats-server 2.11 the
restarted follower refuses B when it replays it (it still holds A, which its own timer has not
removed yet), its stream ends a message short, and as leader it hands out a sequence that was
already handed out: lease-nats's fencing terms go back. The script answers on stdout and exits 0
when every node ends on the same sequence, 1 otherwise (2 on a usage or connection error).

Uses only the Python standard library and speaks the NATS client protocol itself; it reads the
node ports from ci/cluster/nats.sh's layout (clients 42221-42223, monitors 42241-42243).
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "nats.sh")
NODES = ("n1", "n2", "n3")
CLIENT = {n: 42220 + i for i, n in enumerate(NODES, 1)}
MONITOR = {n: 42240 + i for i, n in enumerate(NODES, 1)}
STREAM = "LEASE_REPLICA_CHECK"
SUBJECT = "lease-replica-check.k"
MAX_AGE_S = 1.0
ROUNDS = 3


class Conn:
    """One NATS client connection with request/reply on an inbox of its own."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.line()  # INFO
        self.sock.sendall(
            b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
            b"SUB _INBOX.check.* 1\r\nPING\r\n"
        )
        while self.line() != b"PONG":
            pass
        self.sent = 0

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def payload(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def request(self, subject, body=b"", headers=None):
        """Publishes and answers the reply's body, decoded from JSON."""
        self.sent += 1
        reply = f"_INBOX.check.{self.sent}"
        if headers:
            head = b"NATS/1.0\r\n"
            head += b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"
            self.sock.sendall(
                f"HPUB {subject} {reply} {len(head)} {len(head) + len(body)}\r\n".encode()
                + head
                + body
                + b"\r\n"
            )
        else:
            self.sock.sendall(f"PUB {subject} {reply} {len(body)}\r\n".encode() + body + b"\r\n")
        while True:
            line = self.line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            parts = line.split()
            if parts[0] == b"MSG":
                return json.loads(self.payload(int(parts[-1])) or b"{}")
            if parts[0] == b"HMSG":
                data = self.payload(int(parts[-1]))
                head_len = int(parts[-2])
                body = data[head_len:]
                if not body:  # a status-only reply (e.g. 503 no responders)
                    return {"error": data[:head_len].decode(errors="replace").strip()}
                return json.loads(body)


def cluster(*args):
    out = subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(2)
    return out.stdout.strip()


def last_seqs():
    """Each running node's last sequence of the check stream, and its leader."""
    seqs, leader = {}, None
    for node in NODES:
        try:
            url = f"http://127.0.0.1:{MONITOR[node]}/jsz?accounts=true&streams=true"
            jsz = json.load(urllib.request.urlopen(url, timeout=2))
        except OSError:
            continue
        for account in jsz.get("account_details") or []:
            for stream in account.get("stream_detail") or []:
                if stream["name"] == STREAM:
                    seqs[node] = stream["state"]["last_seq"]
                    leader = stream.get("cluster", {}).get("leader") or leader
    return seqs, leader


def settled(want, within=10.0):
    """Each node's last sequence once every node reports the same one, or after `within`
    seconds (a node that stays behind that long has diverged: catching up takes about a second
    here)."""
    until = time.monotonic() + within
    while True:
        seqs, _ = last_seqs()
        if (len(seqs) == want and len(set(seqs.values())) == 1) or time.monotonic() > until:
            return seqs
        time.sleep(0.5)


def main():
    cluster("start")
    version = cluster("server").split()[-1]
    conn = Conn(CLIENT["n1"])
    conn.request(f"$JS.API.STREAM.DELETE.{STREAM}")
    config = {
        "name": STREAM,
        "subjects": [SUBJECT],
        "num_replicas": 3,
        "storage": "file",
        "max_age": int(MAX_AGE_S * 1e9),
        "max_msgs_per_subject": 1,
        "discard": "new",
    }
    created = conn.request(f"$JS.API.STREAM.CREATE.{STREAM}", json.dumps(config).encode())
    if "error" in created:
        print(f"creating the stream failed: {created['error']}")
        raise SystemExit(2)
    time.sleep(1.0)
    handed_out = 0
    try:
        for _ in range(ROUNDS):
            info = conn.request(f"$JS.API.STREAM.INFO.{STREAM}")
            leader = info["cluster"]["leader"]
            follower = [n for n in NODES if n != leader][-1]
            talk_to = next(n for n in NODES if n not in (leader, follower))
            conn.sock.close()
            conn = Conn(CLIENT[talk_to])
            cluster("kill", follower)
            claim = {"Nats-Expected-Last-Subject-Sequence": "0"}
            a = conn.request(SUBJECT, b"A", claim)
            time.sleep(MAX_AGE_S + 0.4)  # A expires on the leader
            b = conn.request(SUBJECT, b"B", claim)
            if "seq" not in a or "seq" not in b:
                print(f"a write failed: {a} {b}")
                raise SystemExit(2)
            handed_out = max(handed_out, b["seq"])
            cluster("restart", follower)
            seqs = settled(len(NODES))
            print(f"{follower} restarted across A (seq {a['seq']}) and B (seq {b['seq']}): last sequence {seqs}")
        seqs = settled(len(NODES))
        short = [n for n, s in seqs.items() if s < handed_out]
        if not short:
            print(f"nats-server {version}: replicas in step (last sequence {handed_out} on every node)")
            return 0
        # Move the leadership to a short node and claim once more.
        for _ in range(10):
            _, leader = last_seqs()
            if leader in short:
                c = conn.request(SUBJECT, b"C", {"Nats-Expected-Last-Subject-Sequence": "0"})
                print(
                    f"nats-server {version}: replicas diverged {seqs}; with {leader} leading, a claim "
                    f"was given sequence {c.get('seq')} after {handed_out} had been handed out"
                )
                return 1
            conn.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}")
            time.sleep(2.0)
        print(f"nats-server {version}: replicas diverged {seqs} (no short node became leader)")
        return 1
    finally:
        conn.request(f"$JS.API.STREAM.DELETE.{STREAM}")


if __name__ == "__main__":
    sys.exit(main())
