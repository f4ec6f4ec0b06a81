#!/usr/bin/env python3
"""Many models behind one `folio serve`: time to first token of each model cold (load +
prefill) and warm (loaded; a different prompt, so no prefix-cache hit), and the server's
RSS with 0, 1, 2, 3 models loaded and after unloading them.

Usage: models_ttft.py FOLIO_BINARY [MODELS_DIR]
Serves `--models-dir MODELS_DIR` (default: an empty folder, so the models are the folio
model cache's), KV pools of 256 MiB each, on port 18790.
"""
import http.client
import json
import signal
import subprocess
import sys
import tempfile
import time

PORT = 18790


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def req(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.read()


def ttft(model, question):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=json.dumps({
        "model": model, "messages": [{"role": "user", "content": question}],
        "max_tokens": 16, "temperature": 0, "stream": True}), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    while True:
        line = r.readline()
        if not line or line.startswith(b"data: [DONE]"):
            break
        if first is None and line.startswith(b"data: {"):
            j = json.loads(line[6:])
            if j["choices"] and j["choices"][0]["delta"].get("content"):
                first = time.time() - t0
    return first


def main():
    binary = sys.argv[1]
    models_dir = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="folio-models-")
    p = subprocess.Popen([binary, "serve", "--models-dir", models_dir, "--port", str(PORT),
                          "--kv-cache-bytes", "256m"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(150):
            try:
                req("GET", "/health")
                break
            except OSError:
                time.sleep(0.2)
        names = [c["id"] for c in json.loads(req("GET", "/v1/models")[1])["data"]]
        print("models:", names)
        print(f"RSS, none loaded: {rss_mb(p.pid):.0f} MB")
        for i, m in enumerate(names):
            cold = ttft(m, "Name three colors.")
            warm = ttft(m, "Name three animals.")
            print(f"{m}: TTFT cold {cold * 1000:.0f} ms, warm {warm * 1000:.0f} ms; "
                  f"RSS with {i + 1} loaded: {rss_mb(p.pid):.0f} MB")
        for m in names[1:]:
            req("POST", "/models/unload", {"model": m})
        time.sleep(2)
        print(f"RSS with {names[0]} alone after unloading the others: {rss_mb(p.pid):.0f} MB")
        req("POST", "/models/unload", {"model": names[0]})
        time.sleep(2)
        print(f"RSS after unloading all: {rss_mb(p.pid):.0f} MB")
        text = req("GET", "/metrics")[1].decode()
        kv = sum(1 for line in text.splitlines() if "kv_blocks" in line and not line.startswith("#"))
        print(f"KV-block samples in /metrics after unloading all: {kv}")
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)


if __name__ == "__main__":
    main()
