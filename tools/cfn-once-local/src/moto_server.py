"""Runs moto in server mode on a free loopback port for cfn-once's local environment.

Prints the endpoint URL as its first line, then serves until its standard input closes, which
happens when the process that started it exits, however it exits. So a test run or a demo that
crashes never leaves a moto server behind.

One correction makes moto's DynamoDB faithful: moto evaluates a ConditionExpression and then
applies the write without holding a lock, so under concurrent requests two conditional writes
to the same item can both pass (seen here: two racers both "won" a lease, fences 1 and 2).
Real DynamoDB applies each conditional write to an item atomically, and cfn-once's lease rests
on exactly that. So DynamoDB requests are serialised with one lock; every other service stays
concurrent.

One correction keeps moto's SQS from becoming the bottleneck of a loaded run (`make soak`): for
every message a ReceiveMessage hands out, moto checks the queue's retention period by computing
*all* the queue's attributes, each approximate count a pass over every message in the queue, so a
receive costs O(messages) several times per message handed out; with a few thousand messages in
flight, moto spent 42% of its time there and saturated a core (py-spy, `make soak`). The
replacement makes the same check from the one attribute it needs. For the same reason SendMessage
(which every SNS fan-out makes) reads `ContentBasedDeduplication` from the queue itself instead of
from all its attributes. moto is pinned (requirements-dev.txt); if a new version no longer has
the line this replaces, the launcher stops with a message instead of silently running unpatched.
Nothing a client sees changes.

One correction makes moto's S3 refuse what S3 refuses: moto serves a presigned URL however long
ago it expired, and S3 answers 403 `AccessDenied`, "Request has expired", once the time its query
states has passed (SigV4: `X-Amz-Date` plus `X-Amz-Expires` seconds; SigV2: `Expires`, in epoch
seconds). cfn-once's ResponseURLs and wait condition handles are presigned URLs, and a handle
lives for years in a stack whose URL expired a day after it was made (CloudFormation signs them
for 86,399 s), so what the handler does with an expired one is only tested if the local S3 refuses
it too. Such a request is answered 403 with S3's XML error body before moto sees it; a request
signed with an Authorization header (every ordinary SDK call) is never looked at. The hook wraps
the WSGI application ThreadedMotoServer builds; if a new moto no longer builds it the way this
replaces, the launcher stops with a message instead of silently serving expired URLs.

One correction plays what SNS does when it cannot deliver to a queue: moto's SNS raises the SQS
error (a queue that does not exist) out of the Publish call, so the publisher is refused and the
topic's remaining subscriptions get nothing, and it keeps a subscription's RedrivePolicy without
using it. SNS accepts the publish and delivers to each subscription on its own; after a
client-side error (the queue deleted, a policy or key that refuses SNS) it moves the message to
the subscription's dead-letter queue if it has one, and otherwise discards it
(https://docs.aws.amazon.com/sns/latest/dg/sns-dead-letter-queues.html). The replacement does
that for a queue that does not exist, the one client-side error moto raises: the body put in
the dead-letter queue is what the subscription would have delivered (the envelope, or the bare
message with raw delivery), sent by moto's own delivery code. Not played: queue policies (moto
does not evaluate them, so a topic a policy no longer admits is still delivered), SNS's retries
after server-side errors, the attributes SNS adds to a dead-lettered message, and SNS's and
SQS's CloudWatch metrics. If moto's subscription no longer publishes as this expects, the
launcher stops with a message.
"""
import calendar
import copy
import inspect
import json
import logging
import sys
import textwrap
import threading
import time
import uuid
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

import moto.moto_server.threaded_moto_server as threaded_moto_server
import moto.sns.models
import moto.sqs.models

from moto.core.utils import unix_time
from moto.dynamodb.responses import DynamoHandler
from moto.server import ThreadedMotoServer
from moto.sqs.exceptions import QueueDoesNotExist
from moto.sqs.models import SQSBackend
from werkzeug.wsgi import get_input_stream

logging.getLogger("werkzeug").setLevel(logging.ERROR)

_dynamodb_lock = threading.Lock()
_unserialised_call_action = DynamoHandler.call_action


def _serialised_call_action(self):
    with _dynamodb_lock:
        return _unserialised_call_action(self)


DynamoHandler.call_action = _serialised_call_action


def _retained(self, queue_name, message):
    retention_s = self.get_queue(queue_name).message_retention_period
    return retention_s + message.sent_timestamp / 1000 > unix_time()


SQSBackend.is_message_valid_based_on_retention_period = _retained

_ALL_ATTRIBUTES_READ = 'queue.attributes.get("ContentBasedDeduplication") == "true"'
_send_message_source = textwrap.dedent(inspect.getsource(SQSBackend.send_message))
if _ALL_ATTRIBUTES_READ not in _send_message_source:
    sys.exit("moto_server.py: moto's SQSBackend.send_message changed; review the launcher's patch")
_namespace = dict(vars(moto.sqs.models))
exec(_send_message_source.replace(_ALL_ATTRIBUTES_READ, "(queue.fifo_queue and queue.content_based_deduplication)"), _namespace)
SQSBackend.send_message = _namespace["send_message"]


if 'queue_name = self.endpoint.split(":")[-1]' not in inspect.getsource(moto.sns.models.Subscription.publish):
    sys.exit("moto_server.py: moto's SNS Subscription.publish changed; review the launcher's patch")
_undelivered_publish = moto.sns.models.Subscription.publish


def _publish_or_dead_letter(self, message, message_id, *args, **kwargs):
    """Delivers as moto does; a queue that does not exist is a client-side error, after which
    SNS moves the message to the subscription's dead-letter queue, or discards it."""
    try:
        return _undelivered_publish(self, message, message_id, *args, **kwargs)
    except QueueDoesNotExist:
        if self.protocol != "sqs":
            raise
    policy = self.attributes.get("RedrivePolicy")
    if not policy:
        return None
    dead_letters = copy.copy(self)
    dead_letters.endpoint = json.loads(policy)["deadLetterTargetArn"]
    try:
        return _undelivered_publish(dead_letters, message, message_id, *args, **kwargs)
    except QueueDoesNotExist:
        # SNS counts it in NumberOfNotificationsFailedToRedriveToDlq; the message is gone.
        return None


moto.sns.models.Subscription.publish = _publish_or_dead_letter


def _presigned_expiry(query):
    """When a presigned request's query says it expires, as (epoch seconds, its X-Amz-Expires or
    None for SigV2); None if the query carries no signature or no expiry it could be judged by."""
    first = {name: values[0] for name, values in parse_qs(query, keep_blank_values=True).items()}
    try:
        if {"X-Amz-Signature", "X-Amz-Date", "X-Amz-Expires"} <= first.keys():
            signed_s = calendar.timegm(time.strptime(first["X-Amz-Date"], "%Y%m%dT%H%M%SZ"))
            return signed_s + int(first["X-Amz-Expires"]), first["X-Amz-Expires"]
        if {"Signature", "Expires"} <= first.keys():
            return int(first["Expires"]), None
    except ValueError:
        return None
    return None


def _timestamp(epoch_s):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


def _expired_error(expires_s, amz_expires, now_s):
    """S3's answer to a presigned request past its expiry: 403 and this XML body."""
    request_id = uuid.uuid4().hex[:16].upper()
    stated = f"<X-Amz-Expires>{escape(amz_expires)}</X-Amz-Expires>" if amz_expires is not None else ""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>AccessDenied</Code><Message>Request has expired</Message>{stated}"
        f"<Expires>{_timestamp(expires_s)}</Expires><ServerTime>{_timestamp(now_s)}</ServerTime>"
        f"<RequestId>{request_id}</RequestId><HostId>{request_id}</HostId></Error>"
    ).encode()
    headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(body))), ("x-amz-request-id", request_id)]
    return body, headers


def _refusing_expired(app):
    """The WSGI application `app`, except that a presigned request past its expiry is refused
    as S3 refuses it, before `app` sees it."""

    def refusing_expired(environ, start_response):
        expiry = None if "HTTP_AUTHORIZATION" in environ else _presigned_expiry(environ.get("QUERY_STRING", ""))
        now_s = time.time()
        if expiry is None or now_s <= expiry[0]:
            return app(environ, start_response)
        # The body is read and dropped, so that the kept-alive connection is at the next request.
        stream = get_input_stream(environ)
        while stream.read(64 * 1024):
            pass
        body, headers = _expired_error(*expiry, int(now_s))
        start_response("403 Forbidden", headers)
        return [body]

    return refusing_expired


_BUILT_APP = "DomainDispatcherApplication(create_backend_app)"
if _BUILT_APP not in inspect.getsource(threaded_moto_server.ThreadedMotoServer._server_entry):
    sys.exit("moto_server.py: moto's ThreadedMotoServer builds its app differently; review the launcher's patch")
_dispatcher = threaded_moto_server.DomainDispatcherApplication
threaded_moto_server.DomainDispatcherApplication = lambda create_app: _refusing_expired(_dispatcher(create_app))

port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
server.start()
host, bound_port = server.get_host_and_port()
print(f"http://{host}:{bound_port}", flush=True)
try:
    sys.stdin.read()
except KeyboardInterrupt:
    pass
server.stop()
