"""Write a tiny randomly initialised Llama GGUF (vocab 4096, hidden 64, 2 layers, context 4096).

Usage: python make_tiny_gguf.py OUT.gguf   (needs the `gguf` and `numpy` packages from PyPI)

The tokenizer section is a SentencePiece-style ("llama") vocabulary: <unk>, <s>, </s>, 256 byte tokens
and made-up word pieces, enough for llama-server to start, tokenize and detokenize. The weights are
random (fixed seed), so the text is gibberish; only the protocol matters.
"""

import sys

import gguf
import numpy as np

VOCAB = 4096
EMBD = 64
HEADS = 1
LAYERS = 2
FF = 128
CTX = 4096


def vocab():
    tokens, scores, types = [], [], []

    def add(piece, score, kind):
        tokens.append(piece)
        scores.append(score)
        types.append(kind)

    add("<unk>", 0.0, gguf.TokenType.UNKNOWN)
    add("<s>", 0.0, gguf.TokenType.CONTROL)
    add("</s>", 0.0, gguf.TokenType.CONTROL)
    for b in range(256):
        add(f"<0x{b:02X}>", 0.0, gguf.TokenType.BYTE)
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["\u2581"] + list(letters)
    pieces += ["\u2581" + c for c in letters]
    i = 0
    while len(tokens) + len(pieces) < VOCAB:
        # Deterministic made-up words: "▁" + two or three letters, all distinct.
        a, b, c = letters[i % 26], letters[(i // 26) % 26], letters[(i // 676) % 26]
        pieces.append("\u2581" + a + b + (c if i >= 676 else ""))
        i += 1
    for n, p in enumerate(pieces[: VOCAB - len(tokens)]):
        add(p, -float(n), gguf.TokenType.NORMAL)
    assert len(tokens) == VOCAB and len(set(tokens)) == VOCAB
    return tokens, scores, types


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(out, "llama")
    w.add_name("tiny-llama-random")
    w.add_context_length(CTX)
    w.add_embedding_length(EMBD)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(EMBD // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens, scores, types = vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def t(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.5).astype(np.float32))

    t("token_embd.weight", VOCAB, EMBD)
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(EMBD, dtype=np.float32))
        t(f"blk.{i}.attn_q.weight", EMBD, EMBD)
        t(f"blk.{i}.attn_k.weight", EMBD, EMBD)
        t(f"blk.{i}.attn_v.weight", EMBD, EMBD)
        t(f"blk.{i}.attn_output.weight", EMBD, EMBD)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(EMBD, dtype=np.float32))
        t(f"blk.{i}.ffn_gate.weight", FF, EMBD)
        t(f"blk.{i}.ffn_up.weight", FF, EMBD)
        t(f"blk.{i}.ffn_down.weight", EMBD, FF)
    w.add_tensor("output_norm.weight", np.ones(EMBD, dtype=np.float32))
    t("output.weight", VOCAB, EMBD)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
