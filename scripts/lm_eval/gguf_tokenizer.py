"""Builds a Hugging Face tokenizer directory from a GGUF file's vocabulary, offline.

lm-evaluation-harness's `local-completions` model needs a local HF tokenizer (it counts
context tokens itself); the hub is not always reachable, the GGUF file always is. Supports
GPT-2-style byte-level BPE vocabularies (`tokenizer.ggml.model == "gpt2"`), which covers
SmolLM2, Qwen2/3 and Llama 3. Usage: gguf_tokenizer.py MODEL.gguf OUT_DIR
"""
import json
import os
import sys

from gguf import GGUFReader
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, Regex
from tokenizers import AddedToken

# llama.cpp's pre-tokenizer regexes by `tokenizer.ggml.pre` (llama-vocab.cpp), as HF
# pre-tokenizer sequences.
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def pre_tokenizer(pre):
    split = lambda rx: pre_tokenizers.Split(Regex(rx), behavior="isolated")
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in ("smollm", "starcoder", "refact", "smaug-bpe"):
        # \p{N} one digit at a time, then GPT-2's regex.
        return pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    if pre in ("llama3", "llama-bpe"):
        return pre_tokenizers.Sequence([split(LLAMA3), bl])
    if pre in ("qwen2", "qwen35"):
        return pre_tokenizers.Sequence([split(QWEN2), bl])
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def field(r, name):
    f = r.fields.get(name)
    if f is None:
        return None
    if len(f.data) == 1 and f.types[0].name != "ARRAY":
        v = f.parts[f.data[0]]
        return bytes(v).decode("utf-8") if f.types[0].name == "STRING" else v[0].item()
    return [bytes(f.parts[i]).decode("utf-8") if f.types[-1].name == "STRING" else f.parts[i][0].item()
            for i in f.data]


def main(path, out):
    r = GGUFReader(path)
    assert field(r, "tokenizer.ggml.model") == "gpt2", "only byte-level BPE vocabularies"
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizer(field(r, "tokenizer.ggml.pre"))
    tok.decoder = decoders.ByteLevel()
    # Control (3) and user-defined (4) tokens are matched whole, as llama.cpp does.
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, ty in enumerate(types) if ty == 3])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                    for i, ty in enumerate(types) if ty == 4])
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    name = lambda key: (tokens[field(r, key)] if field(r, key) is not None else None)
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": name("tokenizer.ggml.bos_token_id"),
        "eos_token": name("tokenizer.ggml.eos_token_id"),
        "pad_token": name("tokenizer.ggml.padding_token_id") or name("tokenizer.ggml.eos_token_id"),
        "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token") or False),
        "model_max_length": field(r, f"{field(r, 'general.architecture')}.context_length"),
        "clean_up_tokenization_spaces": False,
    }
    tmpl = field(r, "tokenizer.chat_template")
    if tmpl:
        cfg["chat_template"] = tmpl
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"{out}: {len(tokens)} tokens, pre {field(r, 'tokenizer.ggml.pre')}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
