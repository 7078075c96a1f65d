#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Signs one request with botocore (AWS's own signer, Debian python3-botocore), for
tests/unit/test_sigv4.cc to compare tensorfetch's signer against.

  botocore_sign.py header|query METHOD URL AMZDATE REGION SERVICE AKID SECRET TOKEN EXPIRES [NAME:VALUE ...]

Prints, one per line: the canonical request's sha256, the string to sign's sha256, the
signature. TOKEN and EXPIRES may be "-" (none). The URL's query is taken as already encoded.
"""
import hashlib
import sys

from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def main():
    form, method, url, amz_date, region, service, akid, secret, token, expires = sys.argv[1:11]
    headers = dict(h.split(":", 1) for h in sys.argv[11:])
    creds = Credentials(akid, secret, None if token == "-" else token)
    if form == "query":
        signer = S3SigV4QueryAuth(creds, service, region, expires=int(expires))
    elif service == "s3":
        signer = S3SigV4Auth(creds, service, region)
    else:
        signer = SigV4Auth(creds, service, region)
    request = AWSRequest(method=method, url=url, headers=headers)
    request.context["timestamp"] = amz_date
    canonical = signer.canonical_request(request)
    string_to_sign = signer.string_to_sign(request, canonical)
    print(hashlib.sha256(canonical.encode()).hexdigest())
    print(hashlib.sha256(string_to_sign.encode()).hexdigest())
    print(signer.signature(string_to_sign, request))


if __name__ == "__main__":
    main()
