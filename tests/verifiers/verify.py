"""Verifies one webhook request with the official Standard Webhooks library for Python.

usage: verify.py SECRET HEADERS_JSON BODY_FILE   (prints "verified", or exits 1 with the reason)
"""

import json
import sys

from standardwebhooks.webhooks import Webhook

secret, headers_file, body_file = sys.argv[1], sys.argv[2], sys.argv[3]
headers = json.load(open(headers_file))
body = open(body_file, "rb").read()
try:
    Webhook(secret).verify(body, headers)
except Exception as e:  # the library raises WebhookVerificationError
    print(f"refused: {e!r}")
    sys.exit(1)
print("verified")
