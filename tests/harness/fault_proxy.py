"""An HTTP proxy in front of moto that fails a share of DynamoDB writes.

Every Nth UpdateItem or PutItem is failed in one of two ways, alternately:
  * before it reaches moto, with a 400 ThrottlingException (the write did not happen);
  * after moto applied it, with a 500 InternalServerError (the write did happen,
    and the caller cannot tell), which is the case exactly-once must survive.
Everything else passes through. Prints the port it listens on, then serves.

With --budget K it stops injecting after K failures: an outage that ends.

With --deny-after K it passes the first K writes of any kind and refuses
every later one with a 400 AccessDeniedException (nothing applied), as a
role that allows only the first writes would; --every is then unused.

Usage: fault_proxy.py --target http://127.0.0.1:PORT (--every N [--budget K] | --deny-after K)
           [--parent-pid PID]
"""
import argparse
import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from parent import exit_with_parent

WRITES = ("DynamoDB_20120810.UpdateItem", "DynamoDB_20120810.PutItem")
ALL_WRITES = WRITES + (
    "DynamoDB_20120810.DeleteItem",
    "DynamoDB_20120810.TransactWriteItems",
    "DynamoDB_20120810.BatchWriteItem",
)
state = {"writes": 0, "throttled": 0, "failed_after": 0, "denied": 0}
lock = threading.Lock()


def make_handler(target: str, every: int, budget: int, deny_after):
    host = urlparse(target)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _reply(self, status, headers, body):
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status, kind, message):
            body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{kind}", "message": message}).encode()
            self._reply(status, [("Content-Type", "application/x-amz-json-1.0")], body)

        def do_GET(self):
            if self.path == "/fault-proxy/stats":
                with lock:
                    body = json.dumps(state).encode()
                return self._reply(200, [("Content-Type", "application/json")], body)
            self._forward(b"")

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            mode = None
            if deny_after is not None:
                if self.headers.get("X-Amz-Target") in ALL_WRITES:
                    with lock:
                        state["writes"] += 1
                        denied = state["writes"] > deny_after
                        state["denied"] += int(denied)
                    if denied:
                        return self._error(400, "AccessDeniedException", "injected: the role refuses this write")
            elif self.headers.get("X-Amz-Target") in WRITES:
                with lock:
                    state["writes"] += 1
                    n = state["writes"]
                    if n % every == 0 and state["throttled"] + state["failed_after"] < budget:
                        mode = "before" if (n // every) % 2 else "after"
                        state["throttled" if mode == "before" else "failed_after"] += 1
            if mode == "before":
                return self._error(400, "ThrottlingException", "Rate of requests exceeds the allowed throughput.")
            status, headers, payload = self._send(body)
            if mode == "after":
                return self._error(500, "InternalServerError", "Internal server error (injected after the write)")
            self._reply(status, headers, payload)

        def _send(self, body):
            conn = http.client.HTTPConnection(host.hostname, host.port, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            conn.close()
            return resp.status, resp.getheaders(), payload

        def _forward(self, body):
            status, headers, payload = self._send(body)
            self._reply(status, headers, payload)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--every", type=int, default=3)
    parser.add_argument("--budget", type=int, default=1 << 62)
    parser.add_argument("--deny-after", type=int)
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(args.target, args.every, args.budget, args.deny_after))
    if args.parent_pid:
        exit_with_parent(args.parent_pid)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
