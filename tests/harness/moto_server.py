"""A local moto server for the tests and the demo, on 127.0.0.1:PORT.

Single-threaded, because moto's DynamoDB has no locks: the zae-limiter client
writes a cascade's child and parent concurrently, and threaded moto can then
give two stream records one SequenceNumber.

TransactWriteItems is patched: moto backs a transaction up by deep-copying the
table with its whole stream (slow on a long stream) and on cancellation swaps
the copy in, after which older shard iterators see phantom records. Here the
stream is shared instead, and a cancelled transaction's records are cut off.

With --parent-pid the server exits when that process is gone, so a test run
that dies never leaves it behind.

Usage: python moto_server.py PORT [--parent-pid PID]
"""
import os
import sys
import threading
import time

from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import StreamShard
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple


def patch_transactions() -> None:
    StreamShard.__deepcopy__ = lambda self, memo: self
    original = DynamoDBBackend.transact_write_items

    def transact_write_items(self, transact_items):
        tables = {op.get("TableName") for item in transact_items for op in item.values() if isinstance(op, dict)}
        lengths = {
            name: (self.tables[name].stream_shard, len(self.tables[name].stream_shard.items))
            for name in tables
            if name in self.tables and self.tables[name].stream_shard is not None
        }
        try:
            return original(self, transact_items)
        except Exception:
            for name, (shard, length) in lengths.items():
                del shard.items[length:]
                if name in self.tables:
                    self.tables[name].stream_shard = shard
                    shard.table = self.tables[name]
            raise

    DynamoDBBackend.transact_write_items = transact_write_items


def exit_with_parent(pid: int) -> None:
    def watch() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except OSError:
                os._exit(0)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()


def main() -> None:
    port = int(sys.argv[1])
    if "--parent-pid" in sys.argv:
        exit_with_parent(int(sys.argv[sys.argv.index("--parent-pid") + 1]))
    patch_transactions()
    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple("127.0.0.1", port, app, threaded=False, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
