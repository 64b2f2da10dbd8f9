#!/usr/bin/env python3
"""Writes newer_info.resp and newer_docs.resp: COMMAND INFO and COMMAND DOCS
entries, in the RESP3 form of redis70_info.resp / redis70_docs.resp, for the
commands and forms newer than Redis 7.0 that latchkey has. The 7.0.15 oracle
cannot give them, so each is written here from the published page (cited
above it) and the Redis source's command JSON it was generated from.
keyspecs.rs and docs.rs read these beside the 7.0 replies; an entry here
replaces 7.0's for the same name.

Run from this folder: python3 newer.py
"""


class S(str):
    """A RESP3 simple string (flags, ACL categories)."""


class Set(list):
    """A RESP3 set."""


def enc(v):
    if isinstance(v, S):
        return b"+" + v.encode() + b"\r\n"
    if isinstance(v, bool):
        raise TypeError(v)
    if isinstance(v, int):
        return b":%d\r\n" % v
    if isinstance(v, str):
        v = v.encode()
    if isinstance(v, bytes):
        return b"$%d\r\n%s\r\n" % (len(v), v)
    if isinstance(v, Set):
        return b"~%d\r\n" % len(v) + b"".join(enc(x) for x in v)
    if isinstance(v, list):
        return b"*%d\r\n" % len(v) + b"".join(enc(x) for x in v)
    if isinstance(v, dict):
        return b"%%%d\r\n" % len(v) + b"".join(enc(k) + enc(x) for k, x in v.items())
    raise TypeError(v)


def key_spec(flags, notes=None):
    spec = {}
    if notes:
        spec["notes"] = notes
    spec["flags"] = Set(S(f) for f in flags)
    spec["begin_search"] = {"type": "index", "spec": {"index": 1}}
    spec["find_keys"] = {
        "type": "range",
        "spec": {"lastkey": 0, "keystep": 1, "limit": 0},
    }
    return spec


def info(name, arity, flags, acl, specs, first=1, last=1, step=1, tips=()):
    return [
        name,
        arity,
        Set(S(f) for f in flags),
        first,
        last,
        step,
        Set(S("@" + a) for a in acl),
        Set(tips),
        Set(specs),
        Set(),
    ]


def optional(arg):
    """The argument flagged optional, the flags placed before its
    sub-arguments as Redis writes them."""
    out = {k: v for k, v in arg.items() if k != "arguments"}
    out["flags"] = Set([S("optional")])
    if "arguments" in arg:
        out["arguments"] = arg["arguments"]
    return out


KEY = {"name": "key", "type": "key", "key_spec_index": 0}

# https://redis.io/docs/latest/commands/set/ (Redis 8.4.0): the condition
# gains IFEQ ifeq-value, IFNE ifne-value, IFDEQ ifdeq-digest, IFDNE
# ifdne-digest. The digests are typed string, as redis/redis#15305 corrected
# set.json / delex.json (8.4.0 had said integer for a hex string).
IF_ARGS = [
    {"name": "ifeq-value", "type": "string", "token": "IFEQ", "since": "8.4.0"},
    {"name": "ifne-value", "type": "string", "token": "IFNE", "since": "8.4.0"},
    {"name": "ifdeq-digest", "type": "string", "token": "IFDEQ", "since": "8.4.0"},
    {"name": "ifdne-digest", "type": "string", "token": "IFDNE", "since": "8.4.0"},
]

INFO = [
    # https://redis.io/docs/latest/commands/waitaof/ : arity 4, blocking,
    # @slow @blocking @connection, no keys, the two tips (waitaof.json).
    info("waitaof", 4, ["blocking"], ["slow", "blocking", "connection"], [],
         first=0, last=0, step=0,
         tips=["request_policy:all_shards", "response_policy:agg_min"]),
    # https://redis.io/docs/latest/commands/delex/ : arity -2, write fast,
    # @write @string @fast; one key, RW DELETE VARIABLE_FLAGS (delex.json).
    info("delex", -2, ["write", "fast"], ["write", "string", "fast"],
         [key_spec(["RW", "delete", "variable_flags"])]),
    # https://redis.io/docs/latest/commands/digest/ : arity 2, readonly
    # fast, @read @string @fast; one key, RO ACCESS (digest.json).
    info("digest", 2, ["readonly", "fast"], ["read", "string", "fast"],
         [key_spec(["RO", "access"])]),
    # Hash field expiration (Redis 7.4.0; HGETEX, HSETEX, HGETDEL 8.0.0):
    # https://redis.io/docs/latest/commands/hexpire/ and the pages of the
    # others; flags, ACL categories and key specs as hexpire.json,
    # httl.json, hpersist.json, hgetex.json, hsetex.json, hgetdel.json.
] + [
    info(n, -6, ["write", "denyoom", "fast"], ["write", "hash", "fast"],
         [key_spec(["RW", "update"])])
    for n in ["hexpire", "hpexpire", "hexpireat", "hpexpireat"]
] + [
    info(n, -5, ["readonly", "fast"], ["read", "hash", "fast"],
         [key_spec(["RO", "access"])])
    for n in ["httl", "hpttl", "hexpiretime", "hpexpiretime"]
] + [
    info("hpersist", -5, ["write", "fast"], ["write", "hash", "fast"],
         [key_spec(["RW", "update"])]),
    info("hgetex", -5, ["write", "fast"], ["write", "hash", "fast"],
         [key_spec(["RW", "access", "update"])]),
    info("hsetex", -6, ["write", "denyoom", "fast"], ["write", "hash", "fast"],
         [key_spec(["RW", "update"])]),
    info("hgetdel", -5, ["write", "fast"], ["write", "hash", "fast"],
         [key_spec(["RW", "access", "delete"])]),
]


def set_doc():
    cond = [
        {"name": "nx", "type": "pure-token", "token": "NX"},
        {"name": "xx", "type": "pure-token", "token": "XX"},
    ] + IF_ARGS
    return {
        "summary": "Set the string value of a key",
        "since": "1.0.0",
        "group": "string",
        "complexity": "O(1)",
        "history": Set([
            ["2.6.12", "Added the `EX`, `PX`, `NX` and `XX` options."],
            ["6.0.0", "Added the `KEEPTTL` option."],
            ["6.2.0", "Added the `GET`, `EXAT` and `PXAT` option."],
            ["7.0.0", "Allowed the `NX` and `GET` options to be used together."],
            ["8.4.0", "Added `IFEQ`, `IFNE`, `IFDEQ` and `IFDNE` options."],
        ]),
        "arguments": [
            KEY,
            {"name": "value", "type": "string"},
            optional({"name": "condition", "type": "oneof", "since": "2.6.12",
                      "arguments": cond}),
            optional({"name": "get", "type": "pure-token", "token": "GET",
                      "since": "6.2.0"}),
            optional({"name": "expiration", "type": "oneof", "arguments": [
                {"name": "seconds", "type": "integer", "token": "EX", "since": "2.6.12"},
                {"name": "milliseconds", "type": "integer", "token": "PX", "since": "2.6.12"},
                {"name": "unix-time-seconds", "type": "unix-time", "token": "EXAT", "since": "6.2.0"},
                {"name": "unix-time-milliseconds", "type": "unix-time", "token": "PXAT", "since": "6.2.0"},
                {"name": "keepttl", "type": "pure-token", "token": "KEEPTTL", "since": "6.0.0"},
            ]}),
        ],
    }


def fields_block(pairs=False):
    """FIELDS numfields field [field ...] (or field value pairs)."""
    if pairs:
        last = {"name": "data", "type": "block", "flags": Set([S("multiple")]),
                "arguments": [{"name": "field", "type": "string"},
                              {"name": "value", "type": "string"}]}
    else:
        last = {"name": "field", "type": "string", "flags": Set([S("multiple")])}
    return {"name": "fields", "type": "block", "token": "FIELDS", "arguments": [
        {"name": "numfields", "type": "integer"}, last]}


def field_expiration(last, token):
    """HGETEX's / HSETEX's optional EX | PX | EXAT | PXAT | `token`."""
    return optional({"name": "expiration", "type": "oneof", "arguments": [
        {"name": "seconds", "type": "integer", "token": "EX"},
        {"name": "milliseconds", "type": "integer", "token": "PX"},
        {"name": "unix-time-seconds", "type": "unix-time", "token": "EXAT"},
        {"name": "unix-time-milliseconds", "type": "unix-time", "token": "PXAT"},
        {"name": last, "type": "pure-token", "token": token},
    ]})


def hexpire_doc(summary, arg, typ):
    return {
        "summary": summary,
        "since": "7.4.0",
        "group": "hash",
        "complexity": "O(N) where N is the number of specified fields",
        "arguments": [
            KEY,
            {"name": arg, "type": typ},
            optional({"name": "condition", "type": "oneof", "arguments": [
                {"name": "nx", "type": "pure-token", "token": "NX"},
                {"name": "xx", "type": "pure-token", "token": "XX"},
                {"name": "gt", "type": "pure-token", "token": "GT"},
                {"name": "lt", "type": "pure-token", "token": "LT"},
            ]}),
            fields_block(),
        ],
    }


def hfields_doc(summary, since="7.4.0"):
    return {
        "summary": summary,
        "since": since,
        "group": "hash",
        "complexity": "O(N) where N is the number of specified fields",
        "arguments": [KEY, fields_block()],
    }


def without_since(args):
    return [{k: v for k, v in a.items() if k != "since"} for a in args]


DOCS = {
    # https://redis.io/docs/latest/commands/waitaof/
    "waitaof": {
        "summary": "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas.",
        "since": "7.2.0",
        "group": "generic",
        "complexity": "O(1)",
        "arguments": [
            {"name": "numlocal", "type": "integer"},
            {"name": "numreplicas", "type": "integer"},
            {"name": "timeout", "type": "integer"},
        ],
    },
    # https://redis.io/docs/latest/commands/set/
    "set": set_doc(),
    # https://redis.io/docs/latest/commands/delex/
    "delex": {
        "summary": "Conditionally removes the specified key based on value or digest comparison.",
        "since": "8.4.0",
        "group": "string",
        "complexity": "O(1) for IFEQ/IFNE, O(N) for IFDEQ/IFDNE where N is the length of the string value.",
        "arguments": [
            KEY,
            optional({"name": "condition", "type": "oneof",
                      "arguments": without_since(IF_ARGS)}),
        ],
    },
    # https://redis.io/docs/latest/commands/client-no-touch/
    "client|no-touch": {
        "summary": "Controls whether commands sent by the client affect the LRU/LFU of accessed keys",
        "since": "7.2.0",
        "group": "connection",
        "complexity": "O(1)",
        "arguments": [
            {"name": "enabled", "type": "oneof", "arguments": [
                {"name": "on", "type": "pure-token", "token": "ON"},
                {"name": "off", "type": "pure-token", "token": "OFF"},
            ]},
        ],
    },
    # https://redis.io/docs/latest/commands/digest/
    "digest": {
        "summary": "Returns the XXH3 hash of a string value.",
        "since": "8.4.0",
        "group": "string",
        "complexity": "O(N) where N is the length of the string value.",
        "arguments": [KEY],
    },
    # https://redis.io/docs/latest/commands/hexpire/ (and hpexpire,
    # hexpireat, hpexpireat): Redis 7.4.0.
    "hexpire": hexpire_doc("Set expiry for hash field using relative time to expire (seconds)", "seconds", "integer"),
    "hpexpire": hexpire_doc("Set expiry for hash field using relative time to expire (milliseconds)", "milliseconds", "integer"),
    "hexpireat": hexpire_doc("Set expiry for hash field using an absolute Unix timestamp (seconds)", "unix-time-seconds", "unix-time"),
    "hpexpireat": hexpire_doc("Set expiry for hash field using an absolute Unix timestamp (milliseconds)", "unix-time-milliseconds", "unix-time"),
    # https://redis.io/docs/latest/commands/httl/ (and hpttl, hexpiretime,
    # hpexpiretime, hpersist): Redis 7.4.0.
    "httl": hfields_doc("Returns the TTL in seconds of a hash field."),
    "hpttl": hfields_doc("Returns the TTL in milliseconds of a hash field."),
    "hexpiretime": hfields_doc("Returns the expiration time of a hash field as a Unix timestamp, in seconds."),
    "hpexpiretime": hfields_doc("Returns the expiration time of a hash field as a Unix timestamp, in msec."),
    "hpersist": hfields_doc("Removes the expiration time for each specified field"),
    # https://redis.io/docs/latest/commands/hgetdel/ : Redis 8.0.0.
    "hgetdel": hfields_doc("Returns the value of a field and deletes it from the hash.", "8.0.0"),
    # https://redis.io/docs/latest/commands/hgetex/ : Redis 8.0.0.
    "hgetex": {
        "summary": "Get the value of one or more fields of a given hash key, and optionally set their expiration.",
        "since": "8.0.0",
        "group": "hash",
        "complexity": "O(N) where N is the number of specified fields",
        "arguments": [
            KEY,
            field_expiration("persist", "PERSIST"),
            fields_block(),
        ],
    },
    # https://redis.io/docs/latest/commands/hsetex/ : Redis 8.0.0.
    "hsetex": {
        "summary": "Set the value of one or more fields of a given hash key, and optionally set their expiration.",
        "since": "8.0.0",
        "group": "hash",
        "complexity": "O(N) where N is the number of fields being set.",
        "arguments": [
            KEY,
            optional({"name": "condition", "type": "oneof", "arguments": [
                {"name": "fnx", "type": "pure-token", "token": "FNX"},
                {"name": "fxx", "type": "pure-token", "token": "FXX"},
            ]}),
            field_expiration("keepttl", "KEEPTTL"),
            fields_block(pairs=True),
        ],
    },
}

if __name__ == "__main__":
    with open("newer_info.resp", "wb") as f:
        f.write(enc(INFO))
    with open("newer_docs.resp", "wb") as f:
        f.write(enc(DOCS))
