"""Starts mongoeco's MongoDB wire server for lease-mongo's CI suite, with the project's adapters.

Stock mongoeco 4.11.0 answers the MongoDB Rust driver in four ways the driver (or a real
server) does not: each adapter below fixes one, at the wire boundary only, by wrapping a
mongoeco function before the server starts. Nothing here decides what a command does to the
data: filters, pipeline updates, `$$NOW`, upserts and findAndModify are mongoeco's own.

1. Cursor ids: mongoeco sends `cursor.id` as an int32 (a Python int that fits); the driver
   requires an int64, as a real server sends. Every reply's `cursor.id` is sent as an int64.
2. Error codes: mongoeco sends some error replies with no `code` (e.g. `create` of an
   existing collection, which a real server answers with code 48, NamespaceExists). A reply
   without one gets the code a real server gives for that error when it is known
   (`KNOWN_CODES`), and code 1 (InternalError) otherwise, the message kept; each such reply
   is logged.
3. Int64 options: mongoeco refuses int64 values for numeric command options (`limit`,
   `maxTimeMS`, `batchSize`, `skip`, a `getMore` cursor id, ...), which a real server takes
   and the driver sends. Such option values (never data: filters, updates, pipelines and
   documents are left as they are) reach mongoeco as plain integers.
4. Command counters: mongoeco's `serverStatus` has no `metrics.commands`. The adapter counts
   every command the wire server executes, by name, and adds
   `metrics.commands.<name>.{total, failed}` (int64) to `serverStatus`, as a real server does.

One more adapter changes no answer, only how long it takes:

5. Equality shortcuts: mongoeco compares embedded documents (the partition `_id`s
   `{g, p}`) with a general BSON comparison, tries every `$in` value against every document
   (an `update` over 1,000 `_id`s made a million such comparisons: 15-22 s), and scans the
   whole collection for an upsert of a new `_id`. Without a collation, two values whose types
   are plain documents, strings and integers are decided here exactly as MongoDB decides them
   (documents: the same field names in the same order and equal values; strings: the same
   code points; integers of any width: the same value), and a `$in` over such values becomes
   one set lookup. Anything else (floats, decimals, arrays, null, dates, a collation) is left
   to mongoeco. An upsert or insert of a new `_id` made of such values looks the `_id` up under
   each integer width (int32, int64) instead of scanning the collection; an `_id` stored with
   a float or decimal equal to one of its integers would not be found (no test stores one);
   so does a query on `_id` equality or `_id: {$in: [...]}` (the real server's `_id` index).

Usage: launcher.py [--host 127.0.0.1] [--port 27017]  (memory engine; runs until killed)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import signal
import sys

from mongoeco.core import _filtering_matching
from mongoeco.core.bson_scalars import BsonInt32, BsonInt64
from mongoeco.core.codec import _InternalBsonDocument
from mongoeco.core.query_plan import AndCondition, EqualsCondition, InCondition
from mongoeco.engines.memory import MemoryEngine
from mongoeco.errors import CollectionInvalid
from mongoeco.wire import executor as wire_executor
from mongoeco.wire.executor import WireCommandExecutor
from mongoeco.wire.proxy import AsyncMongoEcoProxyServer

# ----------------------------------------------------------------------------- 1. cursor ids


def _int64_cursor_id(result: object) -> None:
    cursor = result.get("cursor") if isinstance(result, dict) else None
    if isinstance(cursor, dict):
        cid = cursor.get("id")
        if isinstance(cid, int) and not isinstance(cid, bool):
            cursor["id"] = BsonInt64(cid)


# ---------------------------------------------------------------------------- 2. error codes

# (exception type, words in the message) -> (code, codeName), as a real server answers.
KNOWN_CODES = (
    (CollectionInvalid, "already exists", 48, "NamespaceExists"),
    (Exception, "already exists", 48, "NamespaceExists"),
    (Exception, "not found", 26, "NamespaceNotFound"),
    (Exception, "does not exist", 26, "NamespaceNotFound"),
)

_stock_error_document = wire_executor.build_error_document


def _error_document_with_code(exc: Exception) -> dict:
    document = _stock_error_document(exc)
    if "code" not in document:
        message = str(document.get("errmsg", exc))
        code, name = 1, "InternalError"
        for kind, words, known_code, known_name in KNOWN_CODES:
            if isinstance(exc, kind) and words in message:
                code, name = known_code, known_name
                break
        document["code"] = code
        document["codeName"] = name
        print(
            f"lease-ci adapter: error reply without a code ({type(exc).__name__}: {message}); "
            f"sent as code {code} ({name})",
            file=sys.stderr,
            flush=True,
        )
    return document


# --------------------------------------------------------------------------- 3. int64 options

# The sub-documents of a command whose scalar fields are options (not data).
OPTION_DOCUMENTS = ("cursor", "writeConcern", "readConcern")


def _plain(value: object) -> object:
    return value.value if isinstance(value, BsonInt64) else value


def _plain_options(body: dict) -> dict:
    """`body` with int64 option values as plain integers: the command's top-level scalars, the
    scalars of its option sub-documents, `killCursors`' cursor ids and each delete's `limit`.
    Documents and arrays of data (filter, update, pipeline, documents, ...) are untouched."""
    out = {}
    for key, value in body.items():
        if isinstance(value, BsonInt64):
            out[key] = value.value
        elif key in OPTION_DOCUMENTS and isinstance(value, dict):
            out[key] = {k: _plain(v) for k, v in value.items()}
        elif key == "cursors" and isinstance(value, list):
            out[key] = [_plain(v) for v in value]
        elif key == "deletes" and isinstance(value, list):
            out[key] = [
                {**d, "limit": _plain(d["limit"])} if isinstance(d, dict) and "limit" in d else d
                for d in value
            ]
        else:
            out[key] = value
    return out


_stock_build_context = WireCommandExecutor._build_request_context


def _build_context_plain_options(self, body, **kwargs):
    return _stock_build_context(self, _plain_options(body), **kwargs)


# ------------------------------------------------------------------------ 4. command counters

COMMANDS_TOTAL: collections.Counter[str] = collections.Counter()
COMMANDS_FAILED: collections.Counter[str] = collections.Counter()

_stock_execute = WireCommandExecutor.execute_prepared


async def _execute_counted(self, context):
    name = context.command_name
    COMMANDS_TOTAL[name] += 1
    try:
        result = await _stock_execute(self, context)
    except Exception:
        COMMANDS_FAILED[name] += 1
        raise
    if isinstance(result, dict):
        if result.get("ok") in (0, 0.0):
            COMMANDS_FAILED[name] += 1
        _int64_cursor_id(result)
        if name == "serverStatus" and result.get("ok") in (1, 1.0):
            metrics = result.setdefault("metrics", {})
            metrics["commands"] = {
                n: {
                    "total": BsonInt64(COMMANDS_TOTAL[n]),
                    "failed": BsonInt64(COMMANDS_FAILED[n]),
                }
                for n in sorted(COMMANDS_TOTAL)
            }
    return result


# ----------------------------------------------------------------------- 5. equality shortcuts


class _Unknown(Exception):
    """A value outside the plain types: mongoeco decides."""


def _key(value: object) -> object:
    """An exact equality key for a plain value (document, string, integer of any width):
    equal keys exactly when MongoDB (without a collation) finds the values equal."""
    kind = type(value)
    if kind is str:
        return ("s", value)
    if kind is BsonInt64 or kind is BsonInt32:
        return ("i", value.value)
    if isinstance(value, int) and kind is not bool:  # int, and bson's Int64 (an int)
        return ("i", int(value))
    if kind is dict or kind is _InternalBsonDocument:
        return ("d", tuple((k, _key(v)) for k, v in value.items()))
    raise _Unknown


def _plain_key(value: object) -> object | None:
    try:
        return _key(value)
    except _Unknown:
        return None


_stock_equality = _filtering_matching.FilteringMatchingMixin._query_equality_matches.__func__


def _equality_with_shortcut(cls, candidate, expected, *, null_matches_undefined, dialect=None,
                            collation=None):
    if collation is None:
        a, b = _plain_key(candidate), _plain_key(expected)
        if a is not None and b is not None:
            return a == b
    kwargs = {"null_matches_undefined": null_matches_undefined, "collation": collation}
    if dialect is not None:
        kwargs["dialect"] = dialect
    return _stock_equality(cls, candidate, expected, **kwargs)


_stock_evaluate_in = _filtering_matching.FilteringMatchingMixin._evaluate_in.__func__
# id(values tuple) -> (the tuple, kept alive so its id is not reused; its set of keys)
_IN_SETS: dict[int, tuple[tuple, frozenset]] = {}


def _in_set(values: tuple) -> frozenset | None:
    cached = _IN_SETS.get(id(values))
    if cached is not None and cached[0] is values:
        return cached[1]
    try:
        keys = frozenset(_key(v) for v in values)
    except _Unknown:
        return None
    if len(_IN_SETS) > 1024:
        _IN_SETS.clear()
    _IN_SETS[id(values)] = (values, keys)
    return keys


def _evaluate_in_with_shortcut(cls, doc, field, values, *, null_matches_undefined=False,
                               dialect=None, collation=None):
    if collation is None and isinstance(values, tuple):
        keys = _in_set(values)
        if keys is not None:
            candidates = cls._extract_values(doc, field)
            plain = [_plain_key(c) for c in candidates]
            if candidates and None not in plain:
                return any(k in keys for k in plain)
    kwargs = {"null_matches_undefined": null_matches_undefined, "collation": collation}
    if dialect is not None:
        kwargs["dialect"] = dialect
    return _stock_evaluate_in(cls, doc, field, values, **kwargs)


def _width_variants(value: object) -> list[object]:
    """`value` (plain) under every integer width: the `_id`s a real server finds equal."""
    kind = type(value)
    if kind is str:
        return [value]
    if kind is BsonInt64 or kind is BsonInt32 or (isinstance(value, int) and kind is not bool):
        n = value.value if kind is BsonInt64 or kind is BsonInt32 else int(value)
        out = [BsonInt64(n)]
        if -(1 << 31) <= n < (1 << 31):
            out.append(n)
        return out
    if kind is dict or kind is _InternalBsonDocument:
        combos: list[list[tuple[str, object]]] = [[]]
        for k, v in value.items():
            combos = [c + [(k, w)] for c in combos for w in _width_variants(v)]
            if len(combos) > 64:
                raise _Unknown
        return [dict(c) for c in combos]
    raise _Unknown


def _id_storage_keys(engine, id_value: object) -> list[object] | None:
    """The storage keys of every `_id` equal to `id_value`, or None when it is not plain."""
    try:
        return [engine._storage_key(v) for v in _width_variants(id_value)]
    except _Unknown:
        return None


_stock_candidates = MemoryEngine._candidate_items_for_plan_locked


def _id_values_from_plan(query_plan) -> tuple | None:
    """The `_id`s a plan admits when it is (or is an `$and` with) `_id` equality or `_id: {$in}`."""
    clauses = query_plan.clauses if isinstance(query_plan, AndCondition) else (query_plan,)
    for clause in clauses:
        if isinstance(clause, EqualsCondition) and clause.field == "_id":
            return (clause.value,)
        if isinstance(clause, InCondition) and clause.field == "_id":
            return clause.values
    return None


def _candidates_by_id(self, coll, query_plan, *, dialect, indexes, index_data, collation,
                      natural_order_limit=None):
    ids = _id_values_from_plan(query_plan) if collation is None else None
    if ids is not None:
        keys: list[object] = []
        for id_value in ids:
            variants = _id_storage_keys(self, id_value)
            if variants is None:
                keys = None
                break
            keys.extend(variants)
        if keys is not None:
            # Every candidate is matched against the whole plan by the caller.
            return [(k, coll[k]) for k in dict.fromkeys(keys) if k in coll]
    return _stock_candidates(self, coll, query_plan, dialect=dialect, indexes=indexes,
                             index_data=index_data, collation=collation,
                             natural_order_limit=natural_order_limit)


_stock_unique = MemoryEngine._ensure_unique_indexes


def _unique_by_id(self, db_name, coll_name, candidate, *, exclude_storage_key=None,
                  indexes_view=None, storage_view=None, index_data_view=None,
                  check_id_storage=False, scan_payload_id=False):
    keys = None
    if check_id_storage and not scan_payload_id and "_id" in candidate:
        keys = _id_storage_keys(self, candidate["_id"])
    if keys is not None:
        coll = (
            (self._storage if storage_view is None else storage_view)
            .get(db_name, {})
            .get(coll_name, {})
        )
        exclude = exclude_storage_key
        if exclude is not None and exclude not in coll:
            exclude = self._storage_key(exclude)
        if any(k in coll and k != exclude for k in keys):
            raise self._unique_key_error(
                f"Duplicate key: _id={candidate['_id']}", f"{db_name}.{coll_name}", candidate
            )
        check_id_storage = False
    return _stock_unique(self, db_name, coll_name, candidate,
                         exclude_storage_key=exclude_storage_key, indexes_view=indexes_view,
                         storage_view=storage_view, index_data_view=index_data_view,
                         check_id_storage=check_id_storage, scan_payload_id=scan_payload_id)


# ----------------------------------------------------------------------------------- start


def apply_adapters() -> None:
    mixin = _filtering_matching.FilteringMatchingMixin
    mixin._query_equality_matches = classmethod(_equality_with_shortcut)
    mixin._evaluate_in = classmethod(_evaluate_in_with_shortcut)
    MemoryEngine._candidate_items_for_plan_locked = _candidates_by_id
    MemoryEngine._ensure_unique_indexes = _unique_by_id
    wire_executor.build_error_document = _error_document_with_code
    WireCommandExecutor._build_request_context = _build_context_plain_options
    WireCommandExecutor.execute_prepared = _execute_counted


async def serve(host: str, port: int) -> None:
    server = AsyncMongoEcoProxyServer(host=host, port=port)
    await server.start()
    print(f"lease-ci: mongoeco listening on {server.address.uri}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=27017)
    args = parser.parse_args()
    apply_adapters()
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
