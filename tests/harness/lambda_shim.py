"""A local stand-in for AWS Lambda, for ONE function, on 127.0.0.1:PORT.

It plays both sides, so an unmodified Lambda binary (Rust `lambda_runtime`)
runs as a child process and boto3 can invoke it:

  * the Lambda service API boto3 calls (endpoint via AWS_ENDPOINT_URL_LAMBDA):
    GetFunctionConfiguration, GetFunction, ListTags, Invoke (RequestResponse,
    Event, DryRun);
  * the Runtime API the child calls (AWS_LAMBDA_RUNTIME_API=127.0.0.1:PORT):
    invocation/next, invocation/{id}/response|error, init/error.

Like one Lambda instance, invocations run one at a time. A child that exits is
restarted on the next invocation; the invocation it died in is answered with a
Runtime.ExitError. An invocation running past --timeout is answered with
"Task timed out after N.00 seconds" and the child is killed.

Prints `http://127.0.0.1:PORT` once listening. With --parent-pid it exits
(killing the child) when that process is gone; SIGTERM does the same.

Usage: lambda_shim.py --function-name NAME --command PATH [--timeout S]
           [--env K=V]... [--tag K=V]... [--log FILE] [--parent-pid PID] [-- ARGS...]
"""
import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

from parent import exit_with_parent

ACCOUNT, REGION = "123456789012", "us-east-1"


class Invocation:
    def __init__(self, payload, wait):
        self.id = str(uuid.uuid4())
        self.payload = payload
        self.done = threading.Event() if wait else None
        self.result = None  # (body, is_error)
        self.deadline = None


class Shim:
    def __init__(self, args, command):
        self.args, self.command = args, command
        self.arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{args.function_name}"
        self.cond = threading.Condition()
        self.pending = collections.deque()
        self.current = None
        self.proc = None
        self.gen = 0  # bumped per child start, so a dead child's /next poll gives up
        self.polled, self.started = False, 0.0
        self.init_error = None
        self.port = None
        self.log = open(args.log, "ab", buffering=0) if args.log else None

    def note(self, msg):
        line = f"[lambda_shim {time.strftime('%H:%M:%S')}] {msg}\n".encode()
        (self.log.write if self.log else sys.stderr.buffer.write)(line)

    # --- child process -----------------------------------------------------
    def start_child(self):  # caller holds self.cond
        env = dict(os.environ)
        env.setdefault("AWS_REGION", REGION)
        env.setdefault("AWS_DEFAULT_REGION", env["AWS_REGION"])
        env.update({
            "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{self.port}",
            "AWS_LAMBDA_FUNCTION_NAME": self.args.function_name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(self.args.memory_size),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_STREAM_NAME": time.strftime("%Y/%m/%d/") + "[$LATEST]shim",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{self.args.function_name}",
            "_HANDLER": "bootstrap",
        })
        env.update(kv(self.args.env))
        out = self.log or sys.stderr  # never our stdout: the parent reads the URL from it
        self.gen += 1
        self.init_error, self.polled, self.started = None, False, time.time()
        # Own session: killpg reaches a wrapper script's children too.
        self.proc = subprocess.Popen(self.command, env=env, stdout=out, stderr=out,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.note(f"started child pid {self.proc.pid}: {' '.join(self.command)}")

    def kill_child(self):  # caller holds self.cond (or is exiting)
        proc, self.proc = self.proc, None
        if proc and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()

    def finish(self, inv, body, is_error):  # caller holds self.cond
        if inv is self.current:
            self.current = None
        if inv.result is None:
            inv.result = (body, is_error)
            if inv.done:
                inv.done.set()
            elif is_error:
                self.note(f"async invocation {inv.id} failed: {body[:500]!r}")
        self.cond.notify_all()

    def supervise(self):
        while True:
            time.sleep(0.05)
            with self.cond:
                inv, proc = self.current, self.proc
                if inv and time.time() * 1000 > inv.deadline:
                    msg = f"RequestId: {inv.id} Error: Task timed out after {self.args.timeout:.2f} seconds"
                    self.note(msg + "; killing the child")
                    self.kill_child()
                    self.finish(inv, err_body("Sandbox.Timedout", msg), True)
                elif proc and proc.poll() is not None:
                    code = proc.returncode
                    self.proc = None
                    self.note(f"child exited with status {code}")
                    # Died mid-invocation, or during init with work waiting: answer that
                    # invocation rather than restart-looping a crashing binary on it.
                    victim = inv or (self.pending.popleft() if self.pending else None)
                    if victim:
                        body = self.init_error or err_body(
                            "Runtime.ExitError",
                            f"RequestId: {victim.id} Error: Runtime exited with error: exit status {code}")
                        self.finish(victim, body, True)
                elif proc and not self.polled and self.pending and time.time() - self.started > self.args.timeout:
                    # Hung in init with work waiting: no deadline covers it yet, so apply one.
                    self.kill_child()
                    victim = self.pending.popleft()
                    msg = f"RequestId: {victim.id} Error: Task timed out after {self.args.timeout:.2f} seconds (init)"
                    self.note(msg + "; killed the child")
                    self.finish(victim, err_body("Sandbox.Timedout", msg), True)
                if self.proc is None and self.pending and self.current is None:
                    self.start_child()

    def enqueue(self, payload, wait):
        inv = Invocation(payload, wait)
        with self.cond:
            self.pending.append(inv)
            if self.current is None and (self.proc is None or self.proc.poll() is not None):
                self.start_child()
            self.cond.notify_all()
        return inv

    def next_invocation(self, gen):
        with self.cond:
            if gen == self.gen:
                self.polled = True
            while True:
                if gen != self.gen:
                    return None
                # A poll from a dead child must not take work it can never answer.
                if self.current is None and self.pending and self.proc and self.proc.poll() is None:
                    inv = self.current = self.pending.popleft()
                    inv.deadline = int(time.time() * 1000) + self.args.timeout * 1000
                    return inv
                self.cond.wait(0.2)

    def configuration(self):
        return {
            "FunctionName": self.args.function_name, "FunctionArn": self.arn,
            "Runtime": "provided.al2023", "Role": f"arn:aws:iam::{ACCOUNT}:role/lambda-shim",
            "Handler": "bootstrap", "CodeSize": 0, "Description": "lambda_shim",
            "Timeout": self.args.timeout, "MemorySize": self.args.memory_size,
            "LastModified": "2026-01-01T00:00:00.000+0000", "CodeSha256": "shim",
            "Version": "$LATEST", "Environment": {"Variables": kv(self.args.env)},
            "TracingConfig": {"Mode": "PassThrough"}, "State": "Active",
            "LastUpdateStatus": "Successful", "PackageType": "Zip", "Architectures": ["x86_64"],
        }


def kv(pairs):
    return dict(p.split("=", 1) for p in pairs or [])


def err_body(kind, message):
    return json.dumps({"errorType": kind, "errorMessage": message}).encode()


def make_handler(shim):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def body(self):
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                data = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length", 0)))

        def reply(self, status, body=b"", headers=()):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def send_json(self, status, obj, headers=()):
            self.reply(status, json.dumps(obj).encode(), headers)

        def aws_error(self, status, kind, message):
            self.send_json(status, {"Type": "User", "Message": message}, [("x-amzn-ErrorType", kind)])

        def not_found(self, ref):
            ref = unquote(ref)
            arn = ref if ref.startswith("arn:") else f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{ref}"
            self.aws_error(404, "ResourceNotFoundException", f"Function not found: {arn}")

        def function(self, ref, query):
            """The qualifier if `ref` (name, ARN or partial ARN, maybe :qualifier) is ours, else None."""
            parts = unquote(ref).split(":")
            if "function" in parts:
                parts = parts[parts.index("function") + 1:]
            if parts[0] != shim.args.function_name:
                return None
            qualifier = parts[1] if len(parts) > 1 else query.get("Qualifier", ["$LATEST"])[0]
            return qualifier if qualifier == "$LATEST" else None

        def do_GET(self):
            url = urlparse(self.path)
            path, query = url.path.rstrip("/").split("/"), parse_qs(url.query)
            if url.path == "/2018-06-01/runtime/invocation/next":
                return self.runtime_next()
            if len(path) >= 4 and path[1:3] == ["2015-03-31", "functions"]:
                if self.function(path[3], query) is None:
                    return self.not_found(path[3])
                if len(path) == 5 and path[4] == "configuration":
                    return self.send_json(200, shim.configuration())
                if len(path) == 4:
                    return self.send_json(200, {
                        "Configuration": shim.configuration(), "Tags": kv(shim.args.tag),
                        "Code": {"RepositoryType": "S3", "Location": "http://127.0.0.1/shim.zip"}})
            if len(path) == 4 and path[1:3] == ["2017-03-31", "tags"]:
                if unquote(path[3]) != shim.arn:
                    return self.not_found(path[3])
                return self.send_json(200, {"Tags": kv(shim.args.tag)})
            self.aws_error(404, "UnknownOperationException", f"Unknown operation GET {url.path}")

        def do_POST(self):
            url = urlparse(self.path)
            path, data = url.path.rstrip("/").split("/"), self.body()
            if path[1:3] == ["2018-06-01", "runtime"]:
                return self.runtime_post(path, data)
            if len(path) == 5 and path[1:3] == ["2015-03-31", "functions"] and path[4] == "invocations":
                qualifier = self.function(path[3], parse_qs(url.query))
                if qualifier is None:
                    return self.not_found(path[3])
                return self.invoke(data)
            self.aws_error(404, "UnknownOperationException", f"Unknown operation POST {url.path}")

        def invoke(self, data):
            kind = self.headers.get("X-Amz-Invocation-Type", "RequestResponse")
            version = [("X-Amz-Executed-Version", "$LATEST")]
            if kind == "DryRun":
                return self.reply(204, b"", version)
            if kind not in ("RequestResponse", "Event"):
                return self.aws_error(400, "InvalidParameterValueException", f"Bad invocation type {kind}")
            inv = shim.enqueue(data or b"{}", wait=kind == "RequestResponse")
            if kind == "Event":
                return self.reply(202, b"", version)
            inv.done.wait()
            body, is_error = inv.result
            headers = version + ([("X-Amz-Function-Error", "Unhandled")] if is_error else [])
            try:
                self.reply(200, body, headers)
            except OSError:
                pass  # the caller stopped waiting (e.g. its read timeout)

        def runtime_next(self):
            with shim.cond:
                gen = shim.gen
            inv = shim.next_invocation(gen)
            if inv is None:  # this poll belongs to a child that has since been replaced
                self.close_connection = True
                return
            trace = f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Parent={uuid.uuid4().hex[:16]};Sampled=0"
            try:
                self.reply(200, inv.payload, [
                    ("Lambda-Runtime-Aws-Request-Id", inv.id),
                    ("Lambda-Runtime-Deadline-Ms", str(inv.deadline)),
                    ("Lambda-Runtime-Invoked-Function-Arn", shim.arn),
                    ("Lambda-Runtime-Trace-Id", trace)])
            except OSError:
                with shim.cond:  # the child vanished between poll and reply
                    shim.finish(inv, err_body("Runtime.ExitError", "Runtime went away"), True)

        def runtime_post(self, path, data):
            if path[3:] == ["init", "error"]:
                with shim.cond:
                    shim.init_error = data or err_body("Runtime.InitError", "init failed")
                return self.send_json(202, {"status": "OK"})
            if len(path) == 6 and path[3] == "invocation" and path[5] in ("response", "error"):
                with shim.cond:
                    inv = shim.current
                    if inv is None or inv.id != path[4]:
                        return self.send_json(400, {"errorType": "InvalidRequestID",
                                               "errorMessage": f"Invalid request ID {path[4]}"})
                    if path[5] == "error" and not data:
                        data = err_body(self.headers.get("Lambda-Runtime-Function-Error-Type", "Unhandled"), "")
                    shim.finish(inv, data, path[5] == "error")
                return self.send_json(202, {"status": "OK"})
            self.send_json(404, {"errorType": "NotFound", "errorMessage": self.path})

    return Handler


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--function-name", required=True)
    parser.add_argument("--command", required=True, help="the Lambda binary; its args go after --")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--memory-size", type=int, default=128)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--log", help="append the child's stdout/stderr here (default: inherit stderr)")
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args(argv)

    shim = Shim(args, [args.command] + extra)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(shim))
    server.daemon_threads = True
    shim.port = server.server_address[1]

    def shutdown(*_):
        shim.kill_child()
        os._exit(0)

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    if args.parent_pid:
        exit_with_parent(args.parent_pid, shutdown)

    with shim.cond:
        shim.start_child()  # warm instance: init runs before the first invoke, as on Lambda
    threading.Thread(target=shim.supervise, daemon=True).start()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{shim.port}", flush=True)
    while True:  # the main thread stays free to run signal handlers
        time.sleep(3600)


if __name__ == "__main__":
    main()
