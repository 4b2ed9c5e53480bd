"""A client generated from the served OpenAPI document (package `sbclient`) talks to a demo
server: a send, a list that finds it, a 422 that parses as the documented error body, and a
real webhook delivery decoded with the event type of the document's `webhooks`."""

import hashlib
import hmac
import http.server
import json
import sys
import threading
import uuid

from sbclient import AuthenticatedClient
from sbclient.api.channels import list_channels
from sbclient.api.messages import list_messages, send_message
from sbclient.models import ErrorBody, MessageSentEvent, SendMessageRequest, SendResponse

base, key = sys.argv[1], sys.argv[2]
client = AuthenticatedClient(base_url=base, token=key, raise_on_unexpected_status=True)

# A receiver for one endpoint (the demo allows local http:// targets).
received = []
arrived = threading.Event()


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        received.append((self.headers, body))
        self.send_response(204)
        self.end_headers()
        arrived.set()

    def log_message(self, *args):
        pass


receiver = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=receiver.serve_forever, daemon=True).start()
created = client.get_httpx_client().post(
    "/api/v1/integrations/webhook-endpoints",
    json={"url": f"http://127.0.0.1:{receiver.server_port}/hooks", "events": ["message.sent"]},
)
assert created.status_code == 201, created.text
secret = created.json()["signing_secret"]

channels = list_channels.sync_detailed(client=client)
assert channels.status_code == 200, channels
slug = channels.parsed.data[0].slug

body = SendMessageRequest.from_dict(
    {"channel_slug": slug, "phone": "+4915112345678", "message": "hello from a generated client"}
)
sent = send_message.sync_detailed(client=client, body=body, idempotency_key=str(uuid.uuid4()))
assert sent.status_code == 201, (sent.status_code, sent.content)
assert isinstance(sent.parsed, SendResponse), sent.parsed
message_id = sent.parsed.message.id

listed = list_messages.sync_detailed(client=client, limit=10)
assert listed.status_code == 200, listed
assert message_id in [m.id for m in listed.parsed.data], "the sent message is listed"

both = SendMessageRequest.from_dict(
    {"channel_id": 1, "channel_slug": slug, "phone": "+4915112345678", "message": "x"}
)
refused = send_message.sync_detailed(client=client, body=both, idempotency_key=str(uuid.uuid4()))
assert refused.status_code == 422, (refused.status_code, refused.content)
assert isinstance(refused.parsed, ErrorBody), refused.parsed
assert refused.parsed.error.code == "channel_conflict", refused.parsed.error.code

assert arrived.wait(30), "the message.sent delivery arrived"
headers, raw = received[0]
timestamp = headers["X-Switchboard-Timestamp"]
expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + raw, hashlib.sha256).hexdigest()
assert f"v1={expected}" in headers["X-Switchboard-Signature"].split(","), "the signature verifies"
event = MessageSentEvent.from_dict(json.loads(raw))
assert event.data.message.id == message_id, (event.data.message.id, message_id)
assert event.metadata.api_version == "v1" and event.channel.slug == slug, event
receiver.shutdown()

print(
    f"generated client: send {message_id}, list, 422 {refused.parsed.error.code}, "
    f"a delivery decoded as {type(event).__name__}: ok"
)
