#!/usr/bin/env python3
"""TTFT of a prompt that shares a ~1,500-token prefix with an earlier one, against the cold
TTFT, and the prefix-cache counters from /metrics (issue 3, acceptance 4).

Usage: prefix_ttft.py [BASE_URL]   (default http://127.0.0.1:8000)
"""
import json, time, urllib.request, sys
base = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
words = ["alpha","river","stone","cloud","seven","green","table","north","quiet","lamp"]
prefix = " ".join(f"{words[(i*7)%10]}{(i*31)%97}" for i in range(525))
def tok(text):
    req = urllib.request.Request(base + "/tokenize", data=json.dumps({"prompt": text}).encode(),
                                 headers={"content-type": "application/json"})
    d = json.load(urllib.request.urlopen(req))
    return d.get("count", len(d.get("tokens", [])))
def ttft(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 4, "stream": True, "temperature": 0}).encode()
    t0 = time.time()
    r = urllib.request.urlopen(urllib.request.Request(base+"/v1/completions", data=body, headers={"content-type":"application/json"}))
    first = None
    for line in r:
        if line.startswith(b"data: {") and first is None:
            first = time.time() - t0
    return first
def metric(name):
    m = urllib.request.urlopen(base+"/metrics").read().decode()
    for l in m.splitlines():
        if l.startswith(name):
            return float(l.split()[-1])
print("prefix tokens:", tok(prefix))
cold = ttft(prefix + "\nQuestion A: what is first?")
q0, h0 = metric("vllm:prefix_cache_queries_total"), metric("vllm:prefix_cache_hits_total")
warm = ttft(prefix + "\nQuestion B: what is last?")
q1, h1 = metric("vllm:prefix_cache_queries_total"), metric("vllm:prefix_cache_hits_total")
print(f"cold TTFT {cold*1000:.1f} ms, warm TTFT {warm*1000:.1f} ms, ratio {warm/cold:.3f}")
print(f"prefix cache: queries +{q1-q0:.0f} tokens, hits +{h1-h0:.0f} tokens")
