"""llama.cpp's `/tokenize` for every pre-tokenizer folio knows, on one small byte-level BPE
vocabulary: the oracle that crates/tokenizer/tests/pretok_oracle.rs holds folio to.

    python3 scripts/pretok_oracle.py --llama-cpp DIR [--server BIN] [--out testdata/pretok]

For each `tokenizer.ggml.pre` name it writes OUT/<name>.gguf (a 1-layer tiny llama with the
vocabulary below and that `pre`) and OUT/<name>.json (each test string and llama.cpp's ids
for it, `add_special` on, `parse_special` off).

The vocabulary: 256 byte tokens and ~900 merges learned (with the `tokenizers` package)
on text *without* any pre-splitting, so merges run across digits, case changes, spaces,
newlines and punctuation; a pre-tokenizer that splits differently from llama.cpp's then
gives different ids. Needs numpy, `tokenizers` and llama.cpp's gguf-py.
"""
import argparse
import json
import os
import sys
import urllib.request

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "arch_oracle"))
from common import import_gguf, post, start_server  # noqa: E402

# The names checked: those of the architectures of issue #31 and their llama.cpp siblings.
PRES = [
    "default", "gpt-2", "llama-bpe", "qwen2", "smollm", "command-r", "refact", "olmo", "dbrx",
    "glm4", "tekken", "gpt-4o", "deepseek-llm", "deepseek-coder", "deepseek-v3", "kimi-k2",
    "falcon",
]

STRINGS = [
    "Hello world",
    "   leading spaces and trailing   ",
    "I'm sure they'll say it's John's; CAN'T WE'VE Don'T 'quoted' 'tis rock'n'roll",
    "1 12 123 1234 12345 123456 1234567 12345678901234567890",
    "3.14159 -42 +7 1e10 0x1F 1,000,000 $12.50 50% 2024-01-31 10:45:00",
    "HelloWorld camelCase snake_case SCREAMING_CASE XMLHttpRequest iPhone McDonald ÉCOLE Ñandú",
    "naïve café résumé — «quotes» “smart” ‘single’ façade Zürich",
    "日本語のテキスト 中文字符串测试 한국어 텍스트 カタカナ ひらがな 漢字かな混じり",
    "emoji 🦀👍🏽 👨‍👩‍👧 ❤️ 🇫🇷 ok👌done",
    "def f(x):\n    return x**2  # comment\n\n\tindented\n        deeper\n",
    "fn main() {\n    println!(\"{}\", 1 << 3);\n}   \n",
    "!!! ??? ... --- *** ((( ))) ;;; :: //path/to/file.txt https://example.com/a?b=c&d=e",
    "line1\nline2\r\nline3\n\n\nline4 \n \n  end",
    "tabs\t\tand  double  spaces   triple    quad",
    "Ελληνικά Русский текст العربية עברית हिन्दी ไทย",
    "mixed123abc ABC123def 12abc34 a1b2c3 H2O CO2 x86_64",
    "   ",
    "\n",
    "a",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "<html><body class=\"main\">Text &amp; more</body></html>",
    "ＡＢＣ全角１２３！？ 「括弧」、。",
    "abc中文def Hello世界 東京Tower 한국어123 日本2024年",
    "HTTPServer aBcDeF ǅungla ʰmod ÀÉÎõü ΣΊΣΥΦΟΣ x'S y'LL we'Re 42nd 1st",
    "combining e\u0301 a\u0308 n\u0303 zero\u200bwidth nbsp\u00a0here thin\u2009space",
    "A-B_C/D\\E|F~G^H`I @home #tag $var %p &amp *ptr ->x <=> !== ...",
    " \n\n  \t\n x \r\n\r\n\r y\u3000z\u0085w",
    "١٢٣ ٤٥ ½ ² Ⅻ 𝟙𝟚𝟛 ① ⑩",
    "中\u2009文\u3000字 ！\u3000？ 。\u3000、 x\u2028y\u205fz \u3000\u3000中 Ａ\u3000ｂ",
    "Ünïcödé ŞİŞLİ İstanbul ǄǅǆǇ ﬁnance Ꜳꜳ ᏣᎳᎩ Ⰰⰰ 𐐀𐐨 ꭰꮿ",
]

TRAIN = "\n".join(STRINGS) + """
The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX! the Quick Brown Fox?
It's what they've said: we'll see, you'd think I'm right; isn't it? They're here.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 100 101 999 1000 2023 2024 31415926 271828 1234567890.
camelCaseWords PascalCaseWords lowerUPPER UPPERlower getHTTPResponse parseJSONData iOS macOS.
def main():\n    for i in range(10):\n        print(i, i * 2)\n    return None\n\n
if (x == 1) { y += 2; } else { z -= 3; } // comment /* block */ #include <stdio.h>
    four spaces\n\ttab\n\n\ndouble newline\r\nwindows\r\n   \n
café naïve résumé über straße Ñandú ÉCOLE ÀÉÎÕÜ àéîõü Ελληνικά γλώσσα Русский язык
日本語 中文 汉字 漢字 한국어 カタカナ ひらがな 東京タワー 北京大学 서울특별시
😀😃😄 🦀 👍🏽 ❤️ 🇫🇷🇩🇪 ✨🔥💯
https://example.com/path?query=value&other=1 user@example.org C:\\Program Files\\x
---- **** #### ==== .... ,,,, !!!! ???? (()) [[]] {{}} <<>> ;; :: '' ""
"""


def train_bpe(n_merges):
    """(tokens, merges) in GPT-2's byte alphabet: the 256 bytes, then one token per merge."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + n_merges, initial_alphabet=alphabet, show_progress=False,
        min_frequency=2,
    )
    tok.train_from_iterator([TRAIN] * 3, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return [t for t, _ in vocab], merges


def write_gguf(gguf, path, pre, tokens, merges):
    """A 1-layer llama whose only purpose is to carry the vocabulary."""
    specials = ["<|end|>", "<s>"]
    tokens = specials + tokens
    n = len(tokens)
    d, ff = 4, 8
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(f"pretok-{pre}")
    w.add_context_length(256)
    w.add_embedding_length(d)
    w.add_block_count(1)
    w.add_feed_forward_length(ff)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_rope_dimension_count(d)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([3] * len(specials) + [1] * (n - len(specials)))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(0)
    rng = np.random.default_rng(1)
    t = lambda *shape: (rng.standard_normal(shape) * 0.1).astype(np.float32)
    w.add_tensor("token_embd.weight", t(n, d).astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(d, np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(d, np.float32))
    for name in ["attn_q", "attn_k", "attn_v", "attn_output"]:
        w.add_tensor(f"blk.0.{name}.weight", t(d, d))
    w.add_tensor("blk.0.ffn_gate.weight", t(ff, d))
    w.add_tensor("blk.0.ffn_up.weight", t(ff, d))
    w.add_tensor("blk.0.ffn_down.weight", t(d, ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (its gguf-py)")
    ap.add_argument("--server", help="llama-server binary")
    ap.add_argument("--out", default="testdata/pretok")
    ap.add_argument("--merges", type=int, default=900)
    ap.add_argument("pres", nargs="*", help="pre names (default: all of PRES)")
    a = ap.parse_args()
    gguf = import_gguf(a.llama_cpp)
    server = a.server or os.path.join(a.llama_cpp, "..", "..", "..", "build", "bin", "llama-server")
    os.makedirs(a.out, exist_ok=True)
    tokens, merges = train_bpe(a.merges)
    for pre in a.pres or PRES:
        path = os.path.join(a.out, f"{pre}.gguf")
        write_gguf(gguf, path, pre, tokens, merges)
        proc, base = start_server(server, path, 256, [])
        try:
            props = json.loads(urllib.request.urlopen(base + "/props", timeout=10).read())
            cases = []
            for s in STRINGS:
                r = post(base + "/tokenize", {"content": s, "add_special": True,
                                               "parse_special": False})
                cases.append({"text": s, "ids": r["tokens"]})
        finally:
            proc.kill()
            proc.wait()
        doc = {
            "pre": pre,
            "model": f"{pre}.gguf (written by scripts/pretok_oracle.py)",
            "llama_cpp": props.get("build_info", "?"),
            "cases": cases,
        }
        with open(os.path.join(a.out, f"{pre}.json"), "w") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
            f.write("\n")
        os.remove(path + ".server.log")
        print(f"{pre}: {len(cases)} strings, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
