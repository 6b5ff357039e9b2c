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
"""
import inspect
import logging
import sys
import textwrap
import threading

import moto.sqs.models

from moto.core.utils import unix_time
from moto.dynamodb.responses import DynamoHandler
from moto.server import ThreadedMotoServer
from moto.sqs.models import SQSBackend

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
