"""Greedy reference outputs from a running llama.cpp llama-server, in the format of
testdata/llamacpp-greedy.json (see testdata/llamacpp-greedy.README.md).

    llama-server -m MODEL.gguf -t 2 --parallel 1 -c 2048 --port 8099 &
    python3 scripts/llamacpp_greedy.py http://127.0.0.1:8099 "MODEL description" OUT.json \
        [--prompts qwen-coder|smollm2|gemma3]

For each prompt: the prompt token ids and pieces (POST /tokenize, add_special and
parse_special on), then POST /completion twice with n_predict=32, temperature=0, top_k=1,
samplers [top_k, temperature], cache_prompt=false, n_probs=5, return_tokens=true:
'greedy' stops at an end-of-generation token (its id is kept in output_token_ids, as
llama.cpp does not put it in the text), 'greedy_ignore_eos' sets ignore_eos (llama.cpp then
puts logit -inf on every EOG token) so exactly 32 tokens come out. The top-5 log-probabilities
are llama.cpp's pre-sampling ones (full softmax of the raw logits, so an EOG token can be the
top-1 at a step where ignore_eos made another token chosen). Standard library only.
"""
import argparse
import json
import math
import sys
import urllib.request

SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"


def chatml(user, system=SYSTEM):
    return f"{system}<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def gemma_turn(user):
    return f"<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n"


COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white", "grey", "pink"]
ANIMALS = ["fox", "owl", "whale", "tiger", "horse", "rabbit", "eagle", "otter", "camel", "panda", "lynx"]
LONG_INVENTORY = "An inventory of a toy shop, one line per item.\n" + "".join(
    f"Item {i}: a {COLOURS[(i * 7) % 10]} {ANIMALS[(i * 3) % 11]} made of wood, priced at {(i * 37) % 90 + 10} dollars, on shelf {i % 12}.\n"
    for i in range(1, 81)
)


PROMPT_SETS = {
    # Qwen2.5-Coder-Instruct: 2 raw code prompts, 3 chats in the model's ChatML template.
    "qwen-coder": [
        ("code_fib", "def fibonacci(n):\n"),
        ("code_c_reverse", "// A C function that reverses a string in place\n"),
        ("chat_capital", chatml("What is the capital of France?")),
        ("chat_python_sort", chatml("Write a Python one-liner that sorts a list of tuples by their second element.")),
        ("chat_explain_recursion", chatml("Explain recursion to a beginner in two sentences.")),
    ],
    # Gemma 3 270M: its turn format (the tokenizer adds <bos>); the last prompt is ~1,900
    # tokens, far past the 512-token sliding window, and asks about its beginning.
    "gemma3": [
        ("chat_capital", gemma_turn("What is the capital of France?")),
        ("chat_haiku", gemma_turn("Write a haiku about the ocean.")),
        ("plain_story", "The quick brown fox jumps over the lazy dog. Once upon a time, in a small village nestled between two mountains,"),
        ("code_fib", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
        ("long_inventory", gemma_turn(LONG_INVENTORY + "\nWhich colour is the animal of item 3? Answer in one word.")),
    ],
    # The prompts of testdata/llamacpp-greedy.json (SmolLM2-135M-Instruct).
    "smollm2": [
        ("chat_capital", "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"),
        ("chat_system_haiku", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWrite a haiku about the ocean.<|im_end|>\n<|im_start|>assistant\n"),
        ("plain_story", "The quick brown fox jumps over the lazy dog. Once upon a time, in a small village nestled between two mountains,"),
        ("number_list", "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"),
        ("code_fib", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ],
}

N_PREDICT = 32
N_PROBS = 5


def post(url, path, body):
    req = urllib.request.Request(
        url.rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def get(url, path):
    with urllib.request.urlopen(url.rstrip("/") + path, timeout=60) as r:
        return json.loads(r.read())


def piece_text(p):
    # /tokenize gives a string, or a list of bytes where the piece is not valid UTF-8.
    if isinstance(p, list):
        return bytes(p).decode("utf-8", errors="backslashreplace")
    return p


def tokenize(url, text):
    r = post(url, "/tokenize", {"content": text, "add_special": True, "parse_special": True, "with_pieces": True})
    toks = r["tokens"]
    if toks and isinstance(toks[0], dict):
        return [t["id"] for t in toks], [piece_text(t["piece"]) for t in toks]
    return toks, None


def run(url, text, n_prompt, ignore_eos):
    body = {
        "prompt": text,
        "n_predict": N_PREDICT,
        "temperature": 0,
        "top_k": 1,
        "samplers": ["top_k", "temperature"],
        "cache_prompt": False,
        "n_probs": N_PROBS,
        "return_tokens": True,
        "ignore_eos": ignore_eos,
        "seed": 0,
    }
    r = post(url, "/completion", body)
    probs = r["completion_probabilities"]
    out_ids = list(r.get("tokens") or [])
    prob_ids = [p["id"] for p in probs]
    # llama.cpp leaves the EOG token out of `tokens` (and the text) but reports its
    # probabilities; the reference keeps it in output_token_ids.
    if out_ids != prob_ids:
        if out_ids == prob_ids[: len(out_ids)] and len(prob_ids) == len(out_ids) + 1:
            out_ids = prob_ids
        elif not out_ids:
            out_ids = prob_ids
        else:
            raise SystemExit(f"tokens {out_ids} disagree with completion_probabilities ids {prob_ids}")
    if r.get("tokens_evaluated") not in (None, n_prompt):
        raise SystemExit(f"server evaluated {r['tokens_evaluated']} prompt tokens, /tokenize gave {n_prompt}")
    top5 = [[[t["id"], round(t["logprob"], 4)] for t in p["top_logprobs"][:N_PROBS]] for p in probs]
    gaps = [row[0][1] - row[1][1] for row in top5]
    gap = min(gaps)
    stop_type = r.get("stop_type")
    if stop_type is None:
        stop_type = "eos" if r.get("stopped_eos") else "limit" if r.get("stopped_limit") else "word"
    for row in top5:
        assert all(not math.isnan(lp) for _, lp in row)
    return {
        "output_token_ids": out_ids,
        "output_text": r["content"],
        "n_output_tokens": len(out_ids),
        "stop_type": stop_type,
        "top5_logprobs_per_step": top5,
        "min_top1_top2_logprob_gap": round(gap, 4),
        "min_gap_step": gaps.index(gap),
        "steps_where_top1_not_chosen": [i for i, (row, t) in enumerate(zip(top5, out_ids)) if row[0][0] != t],
    }


def engine_string(url):
    props = get(url, "/props")
    build = props.get("build_info", "")
    # build_info looks like "b11312-0c1e57098"
    num, _, commit = build.partition("-")
    slots = props.get("total_slots")
    return (
        f"llama.cpp llama-server, commit {commit or '?'} (build {num or '?'}), "
        f"{'single slot' if slots == 1 else f'{slots} slots'}, -t 2 --parallel 1 -c 2048"
    ), props


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("model", help="model description written into the file")
    ap.add_argument("out")
    ap.add_argument("--prompts", default="qwen-coder", choices=sorted(PROMPT_SETS))
    ap.add_argument(
        "--server-flags",
        default="",
        help="further llama-server flags the server runs with, written into 'engine' (e.g. '-fa off')",
    )
    a = ap.parse_args()

    engine, props = engine_string(a.url)
    if a.server_flags:
        engine += " " + a.server_flags
    data = {
        "engine": engine,
        "model": a.model,
        "settings": (
            "POST /completion, n_predict=32, temperature=0, top_k=1, samplers=[top_k,temperature], "
            "cache_prompt=false, n_probs=5, return_tokens=true (top-5 logprobs are pre-sampling, from full softmax). "
            "Prompt tokenized with POST /tokenize add_special=true and parse_special=true "
            "(special tokens such as <|im_start|>/<|im_end|> become single tokens; the model's add_bos_token decides "
            "whether a BOS is added). 'greedy' stops at EOG (the EOG id is included in output_token_ids, not in text); "
            "'greedy_ignore_eos' sets ignore_eos, i.e. logit -inf on EOG tokens, so exactly 32 tokens are produced."
        ),
        "prompts": [],
    }
    for name, text in PROMPT_SETS[a.prompts]:
        ids, pieces = tokenize(a.url, text)
        entry = {"name": name, "prompt_text": text, "prompt_token_ids": ids}
        if pieces is not None:
            entry["prompt_pieces"] = pieces
        entry["greedy"] = run(a.url, text, len(ids), False)
        entry["greedy_ignore_eos"] = run(a.url, text, len(ids), True)
        g, gi = entry["greedy"], entry["greedy_ignore_eos"]
        print(
            f"{name}: {len(ids)} prompt tokens; greedy {g['n_output_tokens']} ({g['stop_type']}, min gap "
            f"{g['min_gap_step']}:{g['min_top1_top2_logprob_gap']}); ignore_eos min gap "
            f"{gi['min_gap_step']}:{gi['min_top1_top2_logprob_gap']} {gi['output_text']!r}",
            file=sys.stderr,
        )
        data["prompts"].append(entry)
    with open(a.out, "w") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
