"""End-of-turn tokens other than EOS end a chat reply in the engine (finish_reason "stop"), with and
without speculative decoding.

stories260K has no end-of-turn token, so the test makes one: a copy of the model in which the
vocabulary entry "▁said" (7 bytes) is renamed "<|end|>" (7 bytes: Phi-3's end of turn) and typed
CONTROL, patched in place so nothing else in the file moves. The reply of the copy must be the
original's reply cut just before its first " said", finished with "stop"; the server used to hide
such a token and generate on to max_tokens.
"""
import struct

import pytest

from conftest import MODEL, Server

GGUF_TYPE_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
CONTROL = 3


def patched_copy(src, dst, old_text, new_text):
    data = bytearray(src.read_bytes())
    assert len(old_text.encode()) == len(new_text.encode())
    off = 24  # magic, version, tensor count, kv count
    n_kv = struct.unpack_from("<Q", data, 16)[0]

    def read_str(o):
        n = struct.unpack_from("<Q", data, o)[0]
        return bytes(data[o + 8:o + 8 + n]), o + 8 + n

    token_offsets, type_offset = {}, None
    for _ in range(n_kv):
        key, off = read_str(off)
        kind = struct.unpack_from("<I", data, off)[0]
        off += 4
        if kind == 8:
            _, off = read_str(off)
        elif kind == 9:
            item, count = struct.unpack_from("<IQ", data, off)
            off += 12
            if item == 8:
                for i in range(count):
                    start = off
                    text, off = read_str(off)
                    if key == b"tokenizer.ggml.tokens":
                        token_offsets[text] = (i, start + 8)
            else:
                if key == b"tokenizer.ggml.token_type":
                    type_offset = off
                off += GGUF_TYPE_SIZES[item] * count
        else:
            off += GGUF_TYPE_SIZES[kind]
    index, at = token_offsets[old_text.encode()]
    data[at:at + len(new_text.encode())] = new_text.encode()
    struct.pack_into("<i", data, type_offset + 4 * index, CONTROL)
    dst.write_bytes(bytes(data))


def reply(server, **extra):
    client = server.client()
    r = client.chat.completions.create(model="stories260K", max_tokens=120, temperature=0,
                                       messages=[{"role": "user", "content": "Tell me a story about a cat."}], **extra)
    return r


@pytest.fixture(scope="module")
def original_reply():
    s = Server("--chat-template", "chatml", "--kv-blocks", "256")
    try:
        return reply(s)
    finally:
        s.stop()


@pytest.mark.parametrize("spec", [[], ["--spec", "ngram", "--spec-fixed"]])
def test_end_of_turn_token_ends_the_reply(tmp_path, original_reply, spec):
    text = original_reply.choices[0].message.content
    assert original_reply.choices[0].finish_reason == "length"
    cut = text.find(" said")
    assert cut > 0, f"the original reply has no ' said' to cut at: {text!r}"
    model = tmp_path / "stories260K-end-of-turn.gguf"
    patched_copy(MODEL, model, "\u2581said", "<|end|>")
    s = Server("--chat-template", "chatml", "--kv-blocks", "256", *spec, model=model)
    try:
        r = reply(s)
        choice = r.choices[0]
        assert choice.finish_reason == "stop"
        assert choice.message.content == text[:cut]
        assert "<|end|>" not in choice.message.content
        assert r.usage.completion_tokens < original_reply.usage.completion_tokens
        # Speculating servers report the drafts in usage; the others do not.
        assert (r.usage.completion_tokens_details is not None) == bool(spec)
    finally:
        s.stop()


def test_speculating_server_gives_the_same_reply_and_reports_drafts(original_reply):
    s = Server("--chat-template", "chatml", "--kv-blocks", "256", "--spec", "ngram", "--spec-fixed")
    try:
        r = reply(s)
        assert r.choices[0].message.content == original_reply.choices[0].message.content
        assert r.choices[0].finish_reason == "length"
        details = r.usage.completion_tokens_details
        drafted = details.accepted_prediction_tokens + details.rejected_prediction_tokens
        assert drafted > 0 and details.accepted_prediction_tokens > 0
        m = s.wait_idle()
        assert m["kestrel_spec_decode_num_draft_tokens_total"] == drafted
        assert m["kestrel_spec_decode_num_accepted_tokens_total"] == details.accepted_prediction_tokens
        assert m["kestrel_spec_decode_num_accepted_tokens_per_pos_total"] == details.accepted_prediction_tokens
        assert m["kestrel_spec_decode_mean_acceptance_length"] > 1.0
        assert m["kestrel_spec_decode_num_catch_up_tokens_total"] == 0  # n-gram lookup runs no model
    finally:
        s.stop()


def test_a_draft_models_catch_up_on_the_prompt_is_counted(original_reply):
    # stories260K as its own draft (same vocabulary; a warning, not an error): the draft computes
    # the prompt before its first draft, and /metrics counts those tokens.
    s = Server("--chat-template", "chatml", "--kv-blocks", "256", "--draft-model", str(MODEL), "--spec-fixed")
    try:
        r = reply(s)
        assert r.choices[0].message.content == original_reply.choices[0].message.content
        m = s.wait_idle()
        # The first round computes the whole prompt (all but the two tokens every round counts).
        assert m["kestrel_spec_decode_num_catch_up_tokens_total"] >= r.usage.prompt_tokens - 2
        assert m["kestrel_spec_decode_num_catch_up_tokens_total"] < r.usage.prompt_tokens + r.usage.completion_tokens
    finally:
        s.stop()
