#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""An S3 server for the tests that checks SigV4 signatures the way S3 does.

s3rver (npm; tools/install-deps.sh puts it in tools/node) serves the S3 API -- buckets,
ListObjectsV2, ranges, ETags, its error codes -- but does not verify V4 signatures. So this
script starts s3rver on a free port and, in front of it, a proxy that recomputes every
request's signature with botocore (AWS's own signer, Debian python3-botocore) from exactly the
headers the client signed -- header form (Authorization) and presigned form (X-Amz-* query) --
and answers as S3 does: 403 InvalidAccessKeyId, 403 SignatureDoesNotMatch, 403 AccessDenied
(unsigned, or an expired presigned URL), 400 ExpiredToken, 400 AuthorizationHeaderMalformed
(another region). Good requests go on to s3rver without their signature; its answers come back
unchanged. Every request is logged as one JSON line (method, path, query names, Range,
If-Match, auth form, signed headers, access key id, status, S3 code) -- never a secret.

  s3_fixture.py --root DIR --ready FILE --log FILE --key AKID:SECRET[:TOKEN] ...
                [--upload BUCKET=DIR ...] [--public BUCKET] [--expired-token TOKEN]
                [--slowdown N] [--max-keys N] [--region R]

--slowdown N answers the first N good GETs 503 SlowDown; --max-keys N makes s3rver answer
listings N keys a page (the client must follow NextContinuationToken).

Writes "PROXY_PORT S3RVER_PORT" to --ready once both serve; runs until killed (SIGTERM).
"""
import argparse
import datetime
import hashlib
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

from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

HERE = os.path.dirname(os.path.abspath(__file__))
S3RVER = os.path.join(HERE, "..", "..", "..", "tools", "node", "node_modules", "s3rver", "bin", "s3rver.js")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_quote(text):
    return quote(text, safe="-_.~")


def error_xml(code, message, **extra):
    more = "".join("<%s>%s</%s>" % (k, v, k) for k, v in extra.items())
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>%s'
            "<RequestId>fixture</RequestId></Error>" % (code, message, more)).encode()


class State:
    def __init__(self, args, s3rver_port):
        self.keys = {}
        for k in args.key:
            parts = k.split(":", 2)
            self.keys[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else None)
        self.public = set(args.public)
        self.expired = set(args.expired_token)
        self.region = args.region
        self.slowdown = args.slowdown
        self.max_keys = args.max_keys
        self.s3rver_port = s3rver_port
        self.log = open(args.log, "a", buffering=1)
        self.lock = threading.Lock()


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None

    def log_message(self, *a):
        pass

    def answer(self, status, body, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    # Returns (status, code, message, extra) for a refused request, or None; fills `info`.
    def verify(self, info):
        st = self.state
        parts = urlsplit(self.path)
        params = parse_qsl(parts.query, keep_blank_values=True)
        q = dict(params)
        auth = self.headers.get("Authorization")
        bucket = parts.path.lstrip("/").split("/", 1)[0]
        if auth and auth.startswith("AWS4-HMAC-SHA256 "):
            info["auth"] = "header"
            fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
            credential, signed, given = fields["Credential"], fields["SignedHeaders"].split(";"), fields["Signature"]
            amz_date = self.headers.get("x-amz-date", "")
            token = self.headers.get("x-amz-security-token")
            expires = None
        elif "X-Amz-Signature" in q:
            info["auth"] = "query"
            credential, signed, given = q["X-Amz-Credential"], q["X-Amz-SignedHeaders"].split(";"), q["X-Amz-Signature"]
            amz_date = q.get("X-Amz-Date", "")
            token = q.get("X-Amz-Security-Token")
            expires = int(q.get("X-Amz-Expires", "0"))
        else:
            info["auth"] = "none"
            if bucket in st.public and self.command in ("GET", "HEAD"):
                return None
            return 403, "AccessDenied", "Access Denied", {}
        info["signed_headers"] = signed
        access_key, date, region, service, _ = credential.split("/")
        info["access_key"] = access_key
        if access_key not in st.keys:
            return 403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.", {}
        secret, want_token = st.keys[access_key]
        if token is not None and token in st.expired:
            return 400, "ExpiredToken", "The provided token has expired.", {}
        if want_token is not None and token != want_token:
            return 403, "InvalidToken", "The provided token is malformed or otherwise invalid.", {}
        info["region"] = region
        if region != st.region:
            code = "AuthorizationHeaderMalformed" if info["auth"] == "header" else "AuthorizationQueryParametersError"
            return 400, code, "the region '%s' is wrong; expecting '%s'" % (region, st.region), {"Region": st.region}
        signed_at = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        now = datetime.datetime.now(datetime.timezone.utc)
        if expires is not None and now > signed_at + datetime.timedelta(seconds=expires):
            return 403, "AccessDenied", "Request has expired", {}
        if expires is None and abs((now - signed_at).total_seconds()) > 900:
            return 403, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large.", {}
        # S3 decodes the query and encodes it again (RFC 3986) before it signs: so does this.
        kept = [(k, v) for k, v in params if k != "X-Amz-Signature"]
        query = "&".join("%s=%s" % (s3_quote(k), s3_quote(v)) for k, v in kept)
        url = "http://%s%s%s" % (self.headers["Host"], parts.path, "?" + query if query else "")
        headers = {h: self.headers.get(h, "") for h in signed if h != "host"}
        request = AWSRequest(method=self.command, url=url, headers=headers)
        request.context["timestamp"] = amz_date
        creds = Credentials(access_key, secret, token)
        signer = S3SigV4QueryAuth(creds, "s3", st.region, expires=expires) if expires is not None \
            else S3SigV4Auth(creds, "s3", st.region)
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if expected != given:
            return 403, "SignatureDoesNotMatch", ("The request signature we calculated does not match the signature you "
                                                  "provided. Check your key and signing method."), {}
        return None

    def handle_any(self):
        st = self.state
        info = {"method": self.command}
        parts = urlsplit(self.path)
        params = parse_qsl(parts.query, keep_blank_values=True)
        info["path"] = parts.path
        info["query"] = {k: v for k, v in params if not k.startswith("X-Amz-")}
        info["query_names"] = sorted(k for k, _ in params)
        info["range"] = self.headers.get("Range")
        info["if_match"] = self.headers.get("If-Match")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        refused = self.verify(info)
        with st.lock:
            slow = self.command == "GET" and st.slowdown > 0 and refused is None
            if slow:
                st.slowdown -= 1
        if slow:
            refused = (503, "SlowDown", "Please reduce your request rate.", {})
        if refused:
            status, code, message, extra = refused
            info.update(status=status, code=code)
            st.log.write(json.dumps(info) + "\n")
            headers = [("Content-Type", "application/xml")]
            if code == "SlowDown":
                headers.append(("Retry-After", "1"))
            if "Region" in extra:
                headers.append(("x-amz-bucket-region", extra["Region"]))
            return self.answer(status, error_xml(code, message, **extra), headers)
        forward = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("authorization", "host") and not k.lower().startswith("x-amz-")}
        kept = [(k, v) for k, v in params if not k.startswith("X-Amz-")]
        if st.max_keys and any(k == "list-type" for k, _ in kept):
            kept.append(("max-keys", str(st.max_keys)))
        query = "&".join("%s=%s" % (s3_quote(k), s3_quote(v)) for k, v in kept)
        conn = http.client.HTTPConnection("127.0.0.1", st.s3rver_port, timeout=60)
        conn.request(self.command, parts.path + ("?" + query if query else ""), body=body, headers=forward)
        r = conn.getresponse()
        data = r.read()
        info.update(status=r.status, bytes=len(data))
        if r.status >= 300:
            info["code"] = ""
            if b"<Code>" in data:
                info["code"] = data.split(b"<Code>", 1)[1].split(b"</Code>", 1)[0].decode()
        st.log.write(json.dumps(info) + "\n")
        headers = [(k, v) for k, v in r.getheaders()
                   if k.lower() not in ("content-length", "transfer-encoding", "connection")]
        conn.close()
        self.answer(r.status, data, headers)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_any


def wait_port(port, proc, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("s3rver exited with %s" % proc.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit("s3rver did not listen on port %d" % port)


def upload(port, bucket, directory):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("PUT", "/" + bucket)
    r = conn.getresponse()
    r.read()
    if r.status not in (200, 409):
        sys.exit("creating bucket %s: HTTP %d" % (bucket, r.status))
    for dirpath, _, names in os.walk(directory):
        for name in sorted(names):
            path = os.path.join(dirpath, name)
            key = os.path.relpath(path, directory)
            with open(path, "rb") as f:
                data = f.read()
            conn.request("PUT", "/%s/%s" % (bucket, quote(key)), body=data,
                         headers={"Content-Length": str(len(data))})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                sys.exit("uploading %s: HTTP %d" % (key, r.status))
    conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--ready", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--key", action="append", default=[])
    p.add_argument("--upload", action="append", default=[])
    p.add_argument("--public", action="append", default=[])
    p.add_argument("--expired-token", action="append", default=[])
    p.add_argument("--slowdown", type=int, default=0)
    p.add_argument("--max-keys", type=int, default=0)
    p.add_argument("--region", default="us-east-1")
    args = p.parse_args()
    s3rver_port = free_port()
    node = os.environ.get("NODE", "node")
    # Under the sanitizer builds the Python tests preload the sanitizer runtimes: not into node.
    node_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    # s3rver makes its continuation tokens with DES, which OpenSSL 3 keeps in its legacy provider.
    proc = subprocess.Popen([node, "--openssl-legacy-provider", S3RVER, "-d", args.root, "-p", str(s3rver_port), "-a", "127.0.0.1", "--silent",
                             "--no-vhost-buckets"], stdin=subprocess.DEVNULL, env=node_env)
    signal.signal(signal.SIGTERM, lambda *_: (proc.terminate(), sys.exit(0)))
    try:
        wait_port(s3rver_port, proc)
        for spec in args.upload:
            bucket, directory = spec.split("=", 1)
            upload(s3rver_port, bucket, directory)
        Proxy.state = State(args, s3rver_port)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
        server.daemon_threads = True
        with open(args.ready + ".tmp", "w") as f:
            f.write("%d %d\n" % (server.server_address[1], s3rver_port))
        os.rename(args.ready + ".tmp", args.ready)
        server.serve_forever()
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
