#!/usr/bin/env python3
"""Writes the round link fuzzer's seeds (fuzz/round_link_fuzzer.cc).

Usage: fuzz/internal/write_round_link_seeds.py fuzz/corpus/round_link_fuzzer

Deterministic. Each seed is one byte (bit 0: 0 the coordinator's end, 1
the node's; bits 1-6 the chunk size less 1; bit 7 at the coordinator's end:
a second link of the same node replaces the first, at the node's end: the
node holds a token) and then what the peer sends: protobuf encoded by hand
(the field numbers of proto/rankd/v1), so the script needs nothing but
Python.
"""
import os
import struct
import sys

NODE_PROOF = b"fuzz-node-proof"


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(number, value):
    return varint(number << 3) + varint(value)


def field_bytes(number, value):
    return varint(number << 3 | 2) + varint(len(value)) + value


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def typed(kind, message):
    return frame(bytes([kind]) + message)


def node_ref(job=b"fuzz", index=7, incarnation=1):
    return (field_bytes(1, job) + field_varint(2, index) +
            field_varint(3, incarnation))


def hello(proof=NODE_PROOF, nonce=b"n" * 32, job=b"fuzz", index=7):
    return frame(
        field_bytes(1, node_ref(job, index)) + field_bytes(2, nonce) +
        field_bytes(3, proof))


def greeting():
    return frame(b"RANKDRL1" + b"c" * 32)


CONTRIBUTION, OUTCOME, KV_REQUEST, KV_CANCEL, KV_REPLY = 1, 2, 3, 4, 5


def contribution(round_, tag, words=(1, 2, 3), index=7):
    rank_frame = field_varint(1, 0) + field_bytes(
        2, b"".join(varint(w) for w in words))
    return typed(
        CONTRIBUTION,
        field_bytes(1, node_ref(index=index)) + field_varint(2, round_) +
        field_bytes(3, rank_frame) + field_varint(4, 1000) +
        field_varint(5, tag))


def member():
    return field_bytes(1, b"fuzz") + field_varint(2, 0)


def kv_request(id_, call, body):
    return typed(KV_REQUEST, field_varint(1, id_) + field_bytes(call, body))


def kv_set(id_, key=b"k", value=b"v"):
    return kv_request(id_, 2, field_bytes(1, member()) + field_bytes(2, key) +
                      field_bytes(3, value))


def kv_get(id_, key=b"k", timeout_ms=0):
    body = field_bytes(1, member()) + field_bytes(2, key)
    if timeout_ms:
        body += field_varint(3, timeout_ms)
    return kv_request(id_, 3, body)


def kv_add(id_, delta=5):
    return kv_request(id_, 4, field_bytes(1, member()) + field_bytes(2, b"n") +
                      field_varint(3, delta))


def kv_delete(id_):
    return kv_request(id_, 5, field_bytes(1, member()) + field_bytes(2, b"k"))


def kv_count(id_):
    return kv_request(id_, 6, field_bytes(1, member()) + field_bytes(2, b"p"))


def kv_cancel(id_):
    return typed(KV_CANCEL, field_varint(1, id_))


def welcome(code=0, message=b"", proof=b""):
    out = b""
    if code:
        out += field_varint(1, code)
    if message:
        out += field_bytes(2, message)
    if proof:
        out += field_bytes(3, proof)
    return frame(out)


def outcome(tag, round_=1, code=0, message=b"", words_le=b""):
    out = field_varint(1, round_)
    if code:
        out += field_varint(2, code)
    if message:
        out += field_bytes(3, message)
    if words_le:
        out += field_bytes(6, words_le)
    out += field_varint(5, tag)
    return typed(OUTCOME, out)


def kv_reply(id_, code=0, value=None):
    out = field_varint(1, id_)
    if code:
        out += field_varint(2, code) + field_bytes(3, b"no")
    if value is not None:
        out += field_bytes(5, field_bytes(1, value))
    return typed(KV_REPLY, out)


# Mode byte: bit 0 the end, bits 1-6 chunk - 1, bit 7 the replacement.
def server(chunk=64, replace=False):
    return bytes([((chunk - 1) % 64) << 1 | (0x80 if replace else 0)])


def node(chunk=64, token=False):
    return bytes([((chunk - 1) % 64) << 1 | 1 | (0x80 if token else 0)])


SEEDS = {
    # The coordinator's end: what a node sends.
    "server_hello_only": server() + hello(),
    "server_hello_bad_proof": server() + hello(proof=b"wrong"),
    "server_hello_not_a_hello": server() + frame(b"\xff\xff\xff"),
    "server_hello_short_nonce": server() + hello(nonce=b"short"),
    "server_hello_oversize": server() + struct.pack("<I", 4097) + b"x" * 16,
    "server_hello_truncated": server() + hello()[:20],
    "server_contribution": server() + hello() + contribution(5, 1),
    "server_contributions_chunked": server(3) + hello() +
    contribution(5, 1) + contribution(7, 2, words=(1 << 31, 1 << 30)) +
    contribution(6, 3),
    "server_contribution_other_node": server() + hello() +
    contribution(5, 1, index=8),
    "server_contribution_not_proto": server() + hello() +
    typed(CONTRIBUTION, b"\xff\xff"),
    "server_kv_calls": server() + hello() + kv_set(1) + kv_get(2) +
    kv_add(3) + kv_delete(4) + kv_count(5),
    "server_kv_get_wait_cancel": server(5) + hello() +
    kv_get(9, timeout_ms=1000) + kv_cancel(9) + kv_cancel(10) + kv_set(11),
    "server_kv_get_wait_close": server() + hello() +
    kv_get(9, timeout_ms=1000),
    "server_kv_reused_id": server() + hello() + kv_get(9, timeout_ms=1000) +
    kv_get(9, timeout_ms=1000),
    "server_kv_no_id": server() + hello() + kv_request(0, 2, b""),
    "server_kv_no_call": server() + hello() + typed(KV_REQUEST,
                                                    field_varint(1, 4)),
    "server_kv_request_oversize": server() + hello() +
    struct.pack("<I", 4 << 20) + bytes([KV_REQUEST]) + b"x" * 8,
    "server_kv_cancel_oversize": server() + hello() +
    struct.pack("<I", 100) + bytes([KV_CANCEL]) + b"x" * 8,
    "server_kv_cancel_not_proto": server() + hello() +
    typed(KV_CANCEL, b"\xff"),
    "server_frame_oversize_untyped": server(2) + hello() +
    struct.pack("<I", 0x7FFFFFFF),
    "server_frame_empty": server() + hello() + frame(b""),
    "server_frame_outcome_type": server() + hello() + outcome(1),
    "server_frame_unknown_type": server() + hello() + typed(9, b"x"),
    "server_frame_truncated": server() + hello() + contribution(5, 1)[:9],
    "server_typed_before_hello": server() + contribution(5, 1),
    "server_replaced": server(replace=True) + hello() + kv_get(
        9, timeout_ms=1000) + contribution(5, 1),
    "server_replaced_in_handshake": server(replace=True) + hello()[:30],
    "server_one_byte_chunks": server(1) + hello() + kv_set(1) +
    contribution(2, 1),
    # The node's end: what a coordinator sends.
    "node_greeting_only": node() + greeting(),
    "node_bad_greeting": node() + frame(b"HTTP/1.1 200 OK\r\n"),
    "node_greeting_oversize": node() + struct.pack("<I", 5000),
    "node_refused": node() + greeting() +
    welcome(code=7, message=b"not a member"),
    "node_welcome_not_proto": node() + greeting() + frame(b"\xff\xff"),
    "node_open": node() + greeting() + welcome(proof=b"p"),
    "node_open_answers": node(7) + greeting() + welcome() +
    outcome(1, words_le=b"\x01\x00\x00\x00\x02\x00\x00\x00") +
    kv_reply(1, value=b"v") + outcome(99) + kv_reply(42),
    "node_open_answers_error": node() + greeting() + welcome() +
    outcome(1, code=4, message=b"round timed out") + kv_reply(1, code=5),
    "node_bad_words_le": node() + greeting() + welcome() +
    outcome(1, words_le=b"\x01\x00\x00"),
    "node_last_words": node() + greeting() + welcome() +
    outcome(0, round_=0, code=8, message=b"too many"),
    "node_contribution_type": node() + greeting() + welcome() +
    contribution(1, 1),
    "node_frame_oversize": node() + greeting() + welcome() +
    struct.pack("<I", 0x7FFFFFFF),
    "node_kv_reply_not_proto": node() + greeting() + welcome() +
    typed(KV_REPLY, b"\xff"),
    "node_token_bad_proof": node(token=True) + greeting() +
    welcome(proof=b"p" * 32) + outcome(1),
    "node_one_byte_chunks": node(1) + greeting() + welcome() + outcome(1) +
    kv_reply(1),
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(SEEDS.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
