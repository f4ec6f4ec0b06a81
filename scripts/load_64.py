#!/usr/bin/env python3
"""64 concurrent streaming clients against a folio (or any OpenAI-compatible) server for a
fixed time, polling /health and /metrics throughout.

Usage: load_64.py BASE_URL [SECONDS] [CLIENTS]
Prints: requests completed, errors, /health failures, and the sampled range of running /
waiting requests and KV usage (which must move and return to idle).
"""
import json
import sys
import threading
import time
import urllib.request

base = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60
clients = int(sys.argv[3]) if len(sys.argv) > 3 else 64
stop = time.time() + seconds
done, errors, health_fail = [0], [0], [0]
lock = threading.Lock()
samples = []


def client(i):
    n = 0
    while time.time() < stop:
        body = json.dumps({"prompt": f"Client {i} request {n}: tell a short story about the number {i * 7 + n}.",
                           "max_tokens": 32, "stream": True, "temperature": 0.7, "seed": i * 1000 + n}).encode()
        try:
            r = urllib.request.urlopen(urllib.request.Request(base + "/v1/completions", data=body,
                                                              headers={"content-type": "application/json"}), timeout=120)
            ok = False
            for line in r:
                if line.strip() == b"data: [DONE]":
                    ok = True
            with lock:
                if ok:
                    done[0] += 1
                else:
                    errors[0] += 1
        except Exception as e:  # noqa: BLE001
            with lock:
                errors[0] += 1
                print("error:", e, file=sys.stderr)
        n += 1


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return None


def monitor():
    while time.time() < stop + 5:
        try:
            t0 = time.time()
            urllib.request.urlopen(base + "/health", timeout=5).read()
            h_ms = (time.time() - t0) * 1000
            m = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
            samples.append((metric(m, "folio_requests_running"), metric(m, "folio_requests_waiting"),
                            metric(m, "vllm:kv_cache_usage_perc"), h_ms))
        except Exception:  # noqa: BLE001
            health_fail[0] += 1
        time.sleep(1)


threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
mon = threading.Thread(target=monitor)
for t in threads + [mon]:
    t.start()
for t in threads + [mon]:
    t.join()
run = [s[0] for s in samples]
wait = [s[1] for s in samples]
kv = [s[2] for s in samples]
hm = [s[3] for s in samples]
print(f"clients={clients} seconds={seconds:.0f} completed={done[0]} errors={errors[0]} health_failures={health_fail[0]}")
print(f"running min/max {min(run)}/{max(run)}  waiting min/max {min(wait)}/{max(wait)}  "
      f"kv_usage min/max {min(kv):.3f}/{max(kv):.3f}  health max {max(hm):.0f} ms")
print(f"last sample (idle after load): running={run[-1]} waiting={wait[-1]} kv_usage={kv[-1]}")
sys.exit(1 if errors[0] or health_fail[0] or run[-1] != 0 else 0)
