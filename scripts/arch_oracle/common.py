"""Tiny random GGUF models of one architecture, written with llama.cpp's own gguf-py (the
tensor names and metadata its converter writes), and llama.cpp's greedy answers on them:
the oracle that crates/engine/tests/arch_oracle.rs holds folio to.

    python3 scripts/arch_oracle/<arch>.py --llama-cpp DIR [--server BIN] [--out testdata/arch]

DIR is a llama.cpp source tree (its gguf-py is imported, so the architecture names and keys
are the ones that llama.cpp knows); BIN is its llama-server (default DIR/../../build/bin/
llama-server, where scripts/build_llamacpp.sh puts it). The script writes OUT/<name>.gguf
and OUT/<name>.json: for each prompt, its token ids, llama.cpp's greedy output ids
(`ignore_eos`) and its top-5 log-probabilities per step (the shape of
testdata/llamacpp-greedy.json). Prompts are token ids, so the byte-level vocabulary's
merges never matter. Standard library + numpy only.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np

# 3 control tokens, 128 ASCII byte tokens and 128 words, then fillers: the vocabulary of every tiny model.
VOCAB = 300
BOS, EOS = 1, 0


def byte_char(b):
    """GPT-2's byte -> printable char alphabet."""
    printable = lambda x: (33 <= x <= 126) or (0xA1 <= x <= 0xAC) or (0xAE <= x <= 0xFF)
    if printable(b):
        return chr(b)
    return chr(256 + sum(1 for x in range(b) if not printable(x)))


def import_gguf(llama_cpp):
    sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
    import gguf  # noqa: E402

    return gguf


class Tiny:
    """A GGUF writer for architecture `arch` with the tiny byte-level tokenizer set and a
    seeded generator for its tensors."""

    def __init__(self, gguf, arch, seed, vocab=VOCAB):
        self.gguf = gguf
        self.arch = arch
        self.vocab = vocab
        self.rng = np.random.default_rng(seed)
        self.path = None
        self.w = None
        self._pending = []
        self._meta = []

    # Metadata and tensors are recorded first and written at `write`, where the path is known.
    def kv(self, method, *args):
        """A GGUFWriter call, e.g. t.kv("add_block_count", 2)."""
        self._meta.append((method, args))

    def tensor(self, name, ne, scale=0.5, dtype="f32"):
        """A seeded random tensor; `ne` in ggml's order (ne[0] = row length)."""
        shape = tuple(reversed(ne))
        data = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self._pending.append((name, data, dtype))
        return data

    def const(self, name, ne, value, dtype="f32"):
        data = np.full(tuple(reversed(ne)), value, dtype=np.float32)
        self._pending.append((name, data, dtype))
        return data

    def ones(self, name, ne):
        return self.const(name, ne, 1.0)

    def norm(self, name, n, spread=0.1):
        """A norm weight near 1 (1 + small noise), so every norm is exercised."""
        data = (1.0 + self.rng.standard_normal(n) * spread).astype(np.float32)
        self._pending.append((name, data, "f32"))
        return data

    def _tokenizer(self, w):
        # Bytes >= 0x80 get plain word tokens instead: a lone such byte is incomplete UTF-8,
        # and llama-server reports no log-probabilities for a token whose text is incomplete.
        tokens = ["<|end|>", "<s>", "<pad>"]
        tokens += [byte_char(b) if b < 0x80 else f"x{b}" for b in range(256)]
        tokens += [f"w{i}" for i in range(len(tokens), self.vocab)]
        # llama.cpp's BPE loader requires a merges list; one merge of two byte tokens.
        tokens[-1] = "ab"
        types = [3, 3, 3] + [1] * (self.vocab - 3)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(["a b"])
        w.add_bos_token_id(BOS)
        w.add_eos_token_id(EOS)
        w.add_add_bos_token(False)

    def write(self, path):
        gguf = self.gguf
        w = gguf.GGUFWriter(path, self.arch)
        w.add_name(f"tiny-{self.arch}")
        w.add_file_type(gguf.LlamaFileType.ALL_F32)
        for method, args in self._meta:
            getattr(w, method)(*args)
        self._tokenizer(w)
        for name, data, dtype in self._pending:
            if dtype == "f16":
                w.add_tensor(name, data.astype(np.float16))
            else:
                w.add_tensor(name, data)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        self.path = path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout=120):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def start_server(server, gguf_path, ctx, extra, port=0):
    port = port or free_port()
    cmd = [server, "-m", gguf_path, "--port", str(port), "-t", "2", "-c", str(ctx),
           "-np", "1", "--no-warmup", "-b", "512", "-ub", "512",
           # Flash attention off: llama.cpp's CPU flash attention sums V in f16, which moves
           # a tiny model's log-probabilities by ~1e-2; without it both engines agree to ~1e-4.
           "-fa", "off"] + list(extra)
    log = open(gguf_path + ".server.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if proc.poll() is not None:
            log.close()
            sys.exit(f"llama-server exited ({proc.returncode}); see {gguf_path}.server.log")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except Exception:
            time.sleep(0.2)
    proc.kill()
    sys.exit("llama-server did not become healthy")


def greedy(base, ids, n_predict):
    """llama.cpp's greedy continuation of `ids` with its pre-sampling top-5 logprobs."""
    r = post(base + "/completion", {
        "prompt": ids, "n_predict": n_predict, "temperature": 0, "top_k": 1,
        "samplers": ["top_k", "temperature"], "cache_prompt": False, "n_probs": 5,
        "return_tokens": True, "ignore_eos": True, "post_sampling_probs": False,
    })
    steps = []
    for p in r["completion_probabilities"]:
        steps.append([[t["id"], round(t["logprob"], 6)] for t in p["top_logprobs"]])
    return r["tokens"], steps


def prompt_ids(seed, n, vocab=VOCAB):
    """Seeded prompt token ids, no control tokens."""
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(3, vocab, n)]


def run_oracle(name, build, prompts, n_predict=16, ctx=512, server_args=()):
    """`build(gguf_module, seed) -> Tiny`; writes OUT/name.gguf and OUT/name.json."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (its gguf-py)")
    ap.add_argument("--server", help="llama-server binary")
    ap.add_argument("--out", default="testdata/arch")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--port", type=int, default=0, help="llama-server's port (default: a free one)")
    a = ap.parse_args()
    gguf = import_gguf(a.llama_cpp)
    server = a.server or os.path.join(a.llama_cpp, "..", "..", "..", "build", "bin", "llama-server")
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{name}.gguf")
    t = build(gguf, a.seed)
    t.write(path)
    proc, base = start_server(server, path, ctx, server_args, a.port)
    try:
        props = json.loads(urllib.request.urlopen(base + "/props", timeout=10).read())
        cases = []
        for i, ids in enumerate(prompts):
            out, steps = greedy(base, ids, n_predict)
            cases.append({
                "name": f"p{i}",
                "prompt_token_ids": ids,
                "output_token_ids": out,
                "top5_logprobs_per_step": steps,
            })
    finally:
        proc.kill()
        proc.wait()
    doc = {
        "model": f"{name}.gguf (tiny random {t.arch}, written by scripts/arch_oracle/{name}.py)",
        "llama_cpp": props.get("build_info", "?"),
        "server_args": list(server_args),
        "n_predict": n_predict,
        "prompts": cases,
    }
    with open(os.path.join(a.out, f"{name}.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.remove(path + ".server.log")
    print(f"{name}: {len(cases)} prompts, {os.path.getsize(path)} bytes -> {a.out}/{name}.json")
