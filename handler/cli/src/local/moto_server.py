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
"""
import logging
import sys
import threading

from moto.dynamodb.responses import DynamoHandler
from moto.server import ThreadedMotoServer

logging.getLogger("werkzeug").setLevel(logging.ERROR)

_dynamodb_lock = threading.Lock()
_unserialised_call_action = DynamoHandler.call_action


def _serialised_call_action(self):
    with _dynamodb_lock:
        return _unserialised_call_action(self)


DynamoHandler.call_action = _serialised_call_action

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
