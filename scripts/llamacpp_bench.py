"""llama.cpp's side of the README's figures, on the same GGUF and 2 threads.

    python3 -m pip install llama-cpp-python==0.3.36   # builds llama.cpp from source
    python3 scripts/llamacpp_bench.py [MODEL.gguf]     # default: folio's cached model

Prints pp512 and tg128 as llama-bench measures them (one 512-token prompt; 128 tokens
decoded one at a time), then aggregate decode of 1, 4 and 16 sequences that each hold 256
tokens of context, all decoded in one `llama_decode` call per step (median of 32 steps):
the figures `folio bench model` prints for itself.
"""
import os
import random
import sys
import time

import llama_cpp as L

MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser(
    os.environ.get("FOLIO_HOME", "~/.cache/folio") + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
)
random.seed(1)


def single_stream():
    m = L.Llama(model_path=MODEL, n_threads=2, n_threads_batch=2, n_ctx=2048, n_batch=512, verbose=False)
    toks = [random.randint(5, 49000) for _ in range(512)]
    best = 1e9
    for _ in range(3):
        m.reset()
        t = time.time()
        m.eval(toks)
        best = min(best, time.time() - t)
    print(f"llama.cpp pp512: {512 / best:.1f} tok/s")
    best = 1e9
    for _ in range(2):
        m.reset()
        m.eval([toks[0]])
        t = time.time()
        for i in range(128):
            m.eval([toks[i + 1]])
        best = min(best, time.time() - t)
    print(f"llama.cpp tg128: {128 / best:.1f} tok/s")


def batched(model, nseq, ctxlen=256, steps=32):
    cp = L.llama_context_default_params()
    cp.n_ctx = nseq * (ctxlen + 64)
    cp.n_batch = cp.n_ubatch = 512
    cp.n_seq_max = nseq
    cp.n_threads = cp.n_threads_batch = 2
    ctx = L.llama_new_context_with_model(model, cp)
    batch = L.llama_batch_init(512, 0, nseq)

    def submit(items):  # (token, position, sequence, wants logits)
        batch.n_tokens = len(items)
        for i, (tok, pos, seq, logits) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, logits
        assert L.llama_decode(ctx, batch) == 0

    for s in range(nseq):
        toks = [random.randint(5, 49000) for _ in range(ctxlen)]
        submit([(t, i, s, 0) for i, t in enumerate(toks)])
    times = []
    for step in range(steps + 1):
        items = [(random.randint(5, 49000), ctxlen + step, s, 1) for s in range(nseq)]
        t = time.time()
        submit(items)
        if step > 0:
            times.append(time.time() - t)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    return nseq / sorted(times)[len(times) // 2]


def main():
    single_stream()
    L.llama_backend_init()
    model = L.llama_load_model_from_file(MODEL.encode(), L.llama_model_default_params())
    base = None
    for n in (1, 4, 16):
        r = batched(model, n)
        base = base or r
        print(f"llama.cpp decode, {n:2d} sequences of 256-token context: {r:7.1f} tok/s ({r / base:.2f}x)")


if __name__ == "__main__":
    main()
