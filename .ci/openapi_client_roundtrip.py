"""A client generated from the served OpenAPI document (package `sbclient`) talks to a demo
server: a send, a list that finds it, and a 422 that parses as the documented error body."""

import sys
import uuid

from sbclient import AuthenticatedClient
from sbclient.api.channels import list_channels
from sbclient.api.messages import list_messages, send_message
from sbclient.models import ErrorBody, SendMessageRequest, SendResponse

base, key = sys.argv[1], sys.argv[2]
client = AuthenticatedClient(base_url=base, token=key, raise_on_unexpected_status=True)

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

print(f"generated client: send {message_id}, list, 422 {refused.parsed.error.code}: ok")
