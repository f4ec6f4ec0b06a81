"""Reference token ids for a SentencePiece (tokenizer.ggml.model = "llama") GGUF from a
running llama.cpp llama-server, in the format of testdata/gemma3-spm-tokens.json (see
testdata/gemma3-spm-tokens.README.md).

    llama-server -m gemma-3-270m-q4_k_m.gguf -t 1 -c 512 --port 8123 &
    python3 scripts/spm_tokens.py http://127.0.0.1:8123 "MODEL description" OUT.json

For each string: POST /tokenize with add_special on and parse_special on, then off
(ids and pieces), and POST /detokenize of the parse_special ids (llama.cpp concatenates
token_to_piece with special tokens rendered, no leading-space strip). Standard library only.
"""
import argparse
import json
import urllib.request

STRINGS = [
    "",
    " ",
    "  ",
    "Hello world",
    " Hello world",
    "  Hello  world  ",
    "trailing space ",
    "a\nb",
    "\n\nparagraph\n\n\n",
    "line one\r\nline two",
    "tabs\tand\t\ttabs",
    "    four spaces of indent",
    "1234567890",
    "3.14159 and 2,718,281,828 and 0x1F",
    "I'm sure they'll say it's fine, don't you?",
    "The quick brown fox jumps over the lazy dog.",
    "naïve café résumé Ångström",
    "Straße, Übermut, çà et là",
    "日本語のテキストです。",
    "中文分词测试：你好，世界！",
    "한국어 텍스트",
    "Ελληνικά και русский текст",
    "עברית ועربية",
    "emoji 🦀👍🏽👨‍👩‍👧 ok",
    "🫠🪿🧌",
    "fn main() {\n    println!(\"{}\", 1 << 3);\n}\n",
    "def f(x):\n\treturn x**2  # square\n",
    "<html><body class=\"x\">&amp;</body></html>",
    "\u0000\u0001\u007f control chars",
    "rare: \U0001d54f\U0001d55a \u2603 \ufb01 \u00ad soft",
    "\u2581 already a lower one eighth block \u2581\u2581",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after a bos in text",
    "text<eos>more",
    "<start_of_turn> space after special",
    "</s> end marker and <unk> and <pad>",
    "<unused0> and <mask>",
    "x<end_of_turn>y",
    "<start_of_turn><end_of_turn>",
    "a" * 40 + " " + "ab" * 15,
    "-" * 33 + "=" * 17,
    "MixedCASE camelCase snake_case kebab-case",
    "https://example.com/path?q=1&r=%20#frag",
]


def post(url, path, body):
    req = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def tokenize(url, text, parse_special):
    out = post(
        url,
        "/tokenize",
        {
            "content": text,
            "add_special": True,
            "parse_special": parse_special,
            "with_pieces": True,
        },
    )["tokens"]
    return [t["id"] for t in out], [t["piece"] for t in out]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("out")
    args = ap.parse_args()
    cases = []
    for text in STRINGS:
        ids, pieces = tokenize(args.url, text, True)
        ids_plain, _ = tokenize(args.url, text, False)
        detok = post(args.url, "/detokenize", {"tokens": ids})["content"]
        cases.append(
            {
                "text": text,
                "ids": ids,
                "pieces": pieces,
                "ids_no_parse_special": ids_plain,
                "detokenized": detok,
            }
        )
    doc = {
        "model": args.model,
        "made_by": "scripts/spm_tokens.py against llama.cpp llama-server /tokenize "
        "(add_special true) and /detokenize",
        "cases": cases,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
