"""Runs moto in server mode on a free loopback port for cfn-once's local environment.

Prints the endpoint URL as its first line, then serves until its standard input closes, which
happens when the process that started it exits, however it exits. So a test run or a demo that
crashes never leaves a moto server behind.
"""
import logging
import sys

from moto.server import ThreadedMotoServer

logging.getLogger("werkzeug").setLevel(logging.ERROR)

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
