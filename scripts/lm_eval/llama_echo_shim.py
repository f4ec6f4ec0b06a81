"""An OpenAI /v1/completions front for llama-server that adds `echo` + `logprobs`.

llama-server answers `echo: true` with "Only no echo is supported", so lm-evaluation-
harness's loglikelihood requests cannot reach it directly. This shim scores a prompt the
slow way: for every position i it asks llama-server's native /completion for one token
after tokens[:i], forcing tokens[i] with a +100 logit bias, and reads tokens[i]'s logprob
from the raw (pre-sampling, `post_sampling_probs: false`) distribution, which the bias does
not touch. llama-server's prompt cache makes each call one new token. Requests without
echo pass through unchanged. Usage: llama_echo_shim.py LISTEN_PORT LLAMA_SERVER_URL
"""
import json
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM = ""


def call(path, body):
    req = urllib.request.Request(UPSTREAM + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def piece(t):
    return t["token"]


def score(prompt, k, max_tokens):
    if isinstance(prompt, str):
        toks = call("/tokenize", {"content": prompt, "add_special": False})["tokens"]
        text = prompt
    else:
        toks = prompt
        text = call("/detokenize", {"tokens": toks})["content"]
    first = call("/detokenize", {"tokens": toks[:1]})["content"]
    tokens, lps, tops = [first], [None], [None]
    for i in range(1, len(toks)):
        r = call("/completion", {"prompt": toks[:i], "n_predict": 1, "n_probs": max(k, 1),
                                 "temperature": 0, "logit_bias": [[toks[i], 100.0]],
                                 "post_sampling_probs": False, "cache_prompt": True})
        p = r["completion_probabilities"][0]
        assert p["id"] == toks[i], (p, toks[i])
        tokens.append(piece(p))
        lps.append(p["logprob"])
        tops.append({piece(t): t["logprob"] for t in p["top_logprobs"][:max(k, 1)]})
    gen = ""
    if max_tokens > 0:
        r = call("/completion", {"prompt": toks, "n_predict": max_tokens, "n_probs": max(k, 1),
                                 "temperature": 0, "post_sampling_probs": False,
                                 "cache_prompt": True})
        for p in r.get("completion_probabilities", []):
            tokens.append(piece(p))
            lps.append(p["logprob"])
            tops.append({piece(t): t["logprob"] for t in p["top_logprobs"][:max(k, 1)]})
        gen = r["content"]
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    return text + gen, {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops,
                        "text_offset": offsets}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/completions") and body.get("echo"):
            prompts = body["prompt"]
            if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
                prompts = [prompts]
            choices = []
            for i, p in enumerate(prompts):
                text, lp = score(p, body.get("logprobs") or 0, body.get("max_tokens", 16))
                choices.append({"index": i, "text": text,
                                "logprobs": lp if body.get("logprobs") is not None else None,
                                "finish_reason": "length"})
            out = {"object": "text_completion", "model": body.get("model"), "choices": choices}
        else:
            out = call(self.path, body)
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


if __name__ == "__main__":
    UPSTREAM = sys.argv[2].rstrip("/")
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
