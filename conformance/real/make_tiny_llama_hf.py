#!/usr/bin/env python3
"""Write a tiny, randomly initialised Llama as a Hugging Face model directory, for SGLang on CPU.

  make_tiny_llama_hf.py DIR

Writes DIR/config.json (LlamaForCausalLM: hidden 256, 2 layers, 4 heads, 2 KV heads, vocab 4096,
max_position_embeddings 4096), DIR/model.safetensors (random bfloat16 weights, seeded, so the same every
time), and a byte-level BPE tokenizer (DIR/tokenizer.json, vocab 4096) trained here with the `tokenizers`
package on generated text, plus DIR/tokenizer_config.json and DIR/generation_config.json. Nothing is
downloaded. Run it with the SGLang venv's python (it has torch, safetensors and tokenizers). Idempotent:
a directory whose files are all present is left as it is.
"""

import json
import os
import random
import sys

VOCAB = 4096
HIDDEN = 256
INTER = 512
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
MAX_POS = 4096
SEED = 17

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": HIDDEN,
    "intermediate_size": INTER,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "head_dim": HEAD_DIM,
    "num_hidden_layers": LAYERS,
    "vocab_size": VOCAB,
    "max_position_embeddings": MAX_POS,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "torch_dtype": "bfloat16",
}

# A minimal chat template, so that /v1/chat/completions works (without one SGLang answers 400).
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)

FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]


def corpus(n_lines=20000):
    """Generated text: pseudo-words from a seeded generator, with digits and punctuation."""
    r = random.Random(SEED)
    syll = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"] + ["th", "ing", "er", "an", "on", "st", "qu"]
    words = ["".join(r.choice(syll) for _ in range(r.randint(1, 4))) for _ in range(12000)]
    for _ in range(n_lines):
        line = " ".join(r.choice(words) for _ in range(r.randint(4, 16)))
        yield line + r.choice([".", ",", "!", "?", " 42.", " (x)", ":"])


def write_tokenizer(d):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<unk>", "<s>", "</s>"],  # ids 0, 1, 2: pad/unk, bos, eos as in config.json
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    n = tok.get_vocab_size()
    if n != VOCAB:
        sys.exit(f"tokenizer trained to {n} tokens, expected {VOCAB}: enlarge the corpus")
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": "<unk>",
                "add_bos_token": False,
                "add_eos_token": False,
                "model_max_length": MAX_POS,
                "clean_up_tokenization_spaces": False,
                "chat_template": CHAT_TEMPLATE,
            },
            f,
            indent=2,
        )


def write_weights(d):
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(SEED)

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    t = {"model.embed_tokens.weight": rnd(VOCAB, HIDDEN), "lm_head.weight": rnd(VOCAB, HIDDEN)}
    t["model.norm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = rnd(HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.k_proj.weight"] = rnd(KV_HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.v_proj.weight"] = rnd(KV_HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.o_proj.weight"] = rnd(HIDDEN, HEADS * HEAD_DIM)
        t[p + "mlp.gate_proj.weight"] = rnd(INTER, HIDDEN)
        t[p + "mlp.up_proj.weight"] = rnd(INTER, HIDDEN)
        t[p + "mlp.down_proj.weight"] = rnd(HIDDEN, INTER)
        t[p + "input_layernorm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
        t[p + "post_attention_layernorm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    done = all(os.path.exists(os.path.join(d, f)) for f in FILES)
    if done and "chat_template" not in open(os.path.join(d, "tokenizer_config.json")).read():
        done = False  # written by an earlier version of this script, without the chat template
    if done:
        print(f"{d}: tiny Llama already written", file=sys.stderr)
        return
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, f, indent=2)
    write_tokenizer(d)
    write_weights(d)
    print(f"{d}: wrote tiny random Llama (vocab {VOCAB}, hidden {HIDDEN}, {LAYERS} layers)", file=sys.stderr)


if __name__ == "__main__":
    main()
