#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Azure Blob Storage for the tests: azurite (npm, Microsoft's emulator) behind a logging proxy.

azurite (tools/install-deps.sh puts it in tools/node) serves the Blob API -- containers, List
Blobs with NextMarker, ranges, ETags, If-Match, Azure's error codes -- and checks Shared Key and
SAS signatures itself (its account devstoreaccount1 and the well-known emulator key). This script
starts it on a free port with a temporary directory, creates the containers and uploads the
files given (Shared Key requests signed here, in Python: an independent signer), and puts in front
of it a proxy that forwards every request unchanged and logs it as one JSON line: method, path,
the query's names (never a value of `sig`), Range, If-Match, status, bytes, x-ms-error-code. The
tests assert requests through that log.

  azure_fixture.py --root DIR --ready FILE --log FILE [--upload CONTAINER=DIR ...]
                   [--public CONTAINER ...] [--max-results N] [--sas-out FILE]

--public makes a container's blobs readable anonymously; --max-results N adds maxresults=N to
every List Blobs request (so the client must follow NextMarker); --sas-out FILE writes a SAS
for the container `models` (read and list, one hour; made here, in Python) for the SAS tests. Writes "PROXY_PORT AZURITE_PORT"
to --ready once both serve; runs until killed (SIGTERM). With AZURITE_DEBUG=FILE in the
environment azurite writes its debug log there (it shows the string it signed).
"""
import argparse
import base64
import email.utils
import hashlib
import hmac
import http.client
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import parse_qsl, quote, urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
AZURITE = os.path.join(HERE, "..", "..", "..", "tools", "node", "node_modules", "azurite", "dist", "src", "blob",
                       "main.js")
ACCOUNT = "devstoreaccount1"
# azurite's fixed account key (published in its README and Microsoft's documentation).
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
VERSION = "2021-08-06"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shared_key(method, path, query, headers):
    """The Authorization header of a Shared Key request (Azure's documented string to sign)."""
    h = {k.lower(): v for k, v in headers.items()}
    length = h.get("content-length", "")
    parts = [method, h.get("content-encoding", ""), h.get("content-language", ""), "" if length == "0" else length,
             h.get("content-md5", ""), h.get("content-type", ""), h.get("date", ""), h.get("if-modified-since", ""),
             h.get("if-match", ""), h.get("if-none-match", ""), h.get("if-unmodified-since", ""), h.get("range", "")]
    canonical_headers = "".join("%s:%s\n" % (k, h[k].strip()) for k in sorted(k for k in h if k.startswith("x-ms-")))
    resource = "/" + ACCOUNT + path
    for k in sorted(query):
        resource += "\n%s:%s" % (k.lower(), query[k])
    to_sign = "\n".join(parts) + "\n" + canonical_headers + resource
    sig = base64.b64encode(hmac.new(base64.b64decode(KEY), to_sign.encode(), hashlib.sha256).digest()).decode()
    return "SharedKey %s:%s" % (ACCOUNT, sig)


def azure_request(port, method, path, query=None, body=b"", extra=None):
    query = query or {}
    headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": VERSION,
               "Content-Length": str(len(body))}
    headers.update(extra or {})
    headers["Authorization"] = shared_key(method, path, query, headers)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    qs = "&".join("%s=%s" % (k, quote(v, safe="")) for k, v in query.items())
    conn.request(method, path + ("?" + qs if qs else ""), body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def upload(port, container, directory, public):
    extra = {"x-ms-blob-public-access": "container"} if public else {}
    status, data = azure_request(port, "PUT", "/%s/%s" % (ACCOUNT, container), {"restype": "container"}, extra=extra)
    if status not in (201, 409):
        sys.exit("creating container %s: HTTP %d %s" % (container, status, data[:300]))
    if directory is None:
        return
    for dirpath, _, names in os.walk(directory):
        for name in sorted(names):
            path = os.path.join(dirpath, name)
            blob = os.path.relpath(path, directory)
            with open(path, "rb") as f:
                data = f.read()
            status, answer = azure_request(port, "PUT", "/%s/%s/%s" % (ACCOUNT, container, quote(blob)), body=data,
                                           extra={"x-ms-blob-type": "BlockBlob"})
            if status != 201:
                sys.exit("uploading %s: HTTP %d %s" % (blob, status, answer[:300]))


def container_sas(container, permissions="rl", seconds=3600):
    """A service SAS for `container` (Azure's documented string to sign, versions 2020-12-06+)."""
    se = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))
    fields = [permissions, "", se, "/blob/%s/%s" % (ACCOUNT, container), "", "", "", "2022-11-02", "c",
              "", "", "", "", "", "", ""]
    sig = base64.b64encode(hmac.new(base64.b64decode(KEY), "\n".join(fields).encode(), hashlib.sha256).digest())
    return "sv=2022-11-02&sr=c&sp=%s&se=%s&sig=%s" % (permissions, quote(se, safe=""), quote(sig.decode(), safe=""))


class State:
    def __init__(self, args, azurite_port):
        self.azurite_port = azurite_port
        self.max_results = args.max_results
        self.log = open(args.log, "a", buffering=1)


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None

    def log_message(self, *a):
        pass

    def handle_any(self):
        st = self.state
        parts = urlsplit(self.path)
        params = parse_qsl(parts.query, keep_blank_values=True)
        info = {"method": self.command, "path": parts.path,
                "query": {k: v for k, v in params if k not in ("sig",)},
                "query_names": sorted(k for k, _ in params),
                "range": self.headers.get("Range"), "if_match": self.headers.get("If-Match"),
                "auth": "sas" if any(k == "sig" for k, _ in params)
                else "sharedkey" if self.headers.get("Authorization") else "none"}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        target = self.path
        if st.max_results and ("comp", "list") in params:
            target += "&maxresults=%d" % st.max_results
        forward = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        conn = http.client.HTTPConnection("127.0.0.1", st.azurite_port, timeout=120)
        conn.request(self.command, target, body=body, headers=forward)
        r = conn.getresponse()
        data = r.read()
        info.update(status=r.status, bytes=len(data), code=r.getheader("x-ms-error-code") or "")
        st.log.write(json.dumps(info) + "\n")
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        conn.close()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_any


def wait_port(port, proc, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("azurite exited with %s" % proc.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit("azurite did not listen on port %d" % port)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--ready", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--upload", action="append", default=[])
    p.add_argument("--public", action="append", default=[])
    p.add_argument("--max-results", type=int, default=0)
    p.add_argument("--sas-out")
    args = p.parse_args()
    os.makedirs(args.root, exist_ok=True)
    azurite_port = free_port()
    node = os.environ.get("NODE", "node")
    # Under the sanitizer builds the Python tests preload the sanitizer runtimes: not into node.
    node_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    # Neither --skipApiVersionCheck (azurite knows the SAS version tensorfetch signs, 2022-11-02)
    # nor --loose (headers or parameters azurite does not support are refused, as Azure would).
    # No telemetry (it would try to reach Azure); path-style URLs only (127.0.0.1:PORT/ACCOUNT/...).
    command = [node, AZURITE, "--blobHost", "127.0.0.1", "--blobPort", str(azurite_port), "--location", args.root,
               "--silent", "--disableTelemetry", "--disableProductStyleUrl"]
    if os.environ.get("AZURITE_DEBUG"):
        command += ["--debug", os.environ["AZURITE_DEBUG"]]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=node_env)
    signal.signal(signal.SIGTERM, lambda *_: (proc.terminate(), sys.exit(0)))
    try:
        wait_port(azurite_port, proc)
        uploads = {}
        for spec in args.upload:
            container, directory = spec.split("=", 1)
            uploads[container] = directory
        for container in args.public:
            uploads.setdefault(container, None)
        for container, directory in uploads.items():
            upload(azurite_port, container, directory, container in args.public)
        if args.sas_out:
            with open(args.sas_out, "w") as f:
                f.write(container_sas("models"))
        Proxy.state = State(args, azurite_port)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
        server.daemon_threads = True
        with open(args.ready + ".tmp", "w") as f:
            f.write("%d %d\n" % (server.server_address[1], azurite_port))
        os.rename(args.ready + ".tmp", args.ready)
        server.serve_forever()
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
