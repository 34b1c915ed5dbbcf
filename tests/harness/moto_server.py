"""A local moto server for the tests and the demo, on 127.0.0.1:PORT.

Single-threaded, because moto's DynamoDB has no locks: the zae-limiter client
writes a cascade's child and parent concurrently, and threaded moto can then
give two stream records one SequenceNumber.

TransactWriteItems is patched: moto backs a transaction up by deep-copying the
whole table with its stream (time and memory grow with the table: a 2,000-level
apply reached 16 GB), and on cancellation swaps the copy in, after which older
shard iterators see phantom records. Here a transaction backs up only the items
it touches, restores them on cancellation, and cuts off its stream records.

With --parent-pid the server exits when that process is gone, so a test run
that dies never leaves it behind.

Usage: python moto_server.py PORT [--parent-pid PID]
"""
import copy
import os
import sys

from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple

from parent import exit_with_parent


def patch_transactions() -> None:
    """A transaction backs up only the items it touches, and restores them
    (and cuts its stream records) when it is cancelled."""
    original = DynamoDBBackend.transact_write_items

    def touched(backend, transact_items):
        keys = []
        for entry in transact_items:
            for op in entry.values():
                if not isinstance(op, dict) or op.get("TableName") not in backend.tables:
                    continue
                table = backend.tables[op["TableName"]]
                source = op.get("Item") or op.get("Key") or {}
                if table.hash_key_attr not in source:
                    continue
                hash_key = DynamoType(source[table.hash_key_attr])
                range_key = DynamoType(source[table.range_key_attr]) if table.range_key_attr in source else None
                keys.append((table, hash_key, range_key))
        return keys

    def restore(table, hash_key, range_key, item) -> None:
        if range_key is None:
            if item is None:
                table.items.pop(hash_key, None)
            else:
                table.items[hash_key] = item
        elif item is None:
            table.items.get(hash_key, {}).pop(range_key, None)
        else:
            table.items[hash_key][range_key] = item

    def transact_write_items(self, transact_items):
        keys = touched(self, transact_items)
        saved = []
        for table, hash_key, range_key in keys:
            try:
                item = table.get_item(hash_key, range_key)
            except Exception:
                item = None
            saved.append((table, hash_key, range_key, copy.deepcopy(item)))
        shards = {
            id(table): (table, table.stream_shard, len(table.stream_shard.items))
            for table, _, _ in keys
            if table.stream_shard is not None
        }
        # moto's own backup deep-copies whole tables (and their streams): skip it.
        Table.__deepcopy__ = lambda table, memo: table
        try:
            return original(self, transact_items)
        except Exception:
            for table, hash_key, range_key, item in reversed(saved):
                restore(table, hash_key, range_key, item)
            for table, shard, length in shards.values():
                del shard.items[length:]
                table.stream_shard = shard
            raise
        finally:
            del Table.__deepcopy__

    DynamoDBBackend.transact_write_items = transact_write_items


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
