#!/usr/bin/env python3
"""Peak KV held by one long conversation, read from a running server's /metrics.

Sends a multi-turn chat of about --tokens prompt tokens (streamed, greedy) to
BASE_URL/v1/chat/completions and polls BASE_URL/metrics meanwhile; prints the peak of
folio_kv_blocks_used and folio_kv_bytes_used, the released-window-blocks counter and the
output text. Run it once against `folio serve --model gemma3-270m` and once against the
same server with `--swa-full` to compare (same output, fewer blocks).

    python3 scripts/window_kv_metrics.py http://127.0.0.1:8000 --tokens 4000
"""

import argparse
import json
import threading
import time
import urllib.request

FACTS = [
    "The harbour master logs every ship that enters before dawn.",
    "Ledgers from the old mill list flour, salt and lamp oil by the barrel.",
    "The north road floods each spring, so carts take the ridge path instead.",
    "Bells at the chapel ring twice at noon and once at dusk.",
]


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base_url")
    ap.add_argument("--tokens", type=int, default=4000, help="approximate prompt tokens")
    ap.add_argument("--max-tokens", type=int, default=32)
    a = ap.parse_args()
    base = a.base_url.rstrip("/")

    # ~78 tokens per round: the facts, an answer turn and the chat template's markers
    # (Gemma 3's tokenizer and template).
    messages, rounds = [], max(1, a.tokens // 78)
    for i in range(rounds):
        messages.append({"role": "user", "content": "More about the town: " + " ".join(FACTS)})
        messages.append({"role": "assistant", "content": f"Noted, part {i + 1}."})
    messages.append({"role": "user", "content": "What floods each spring?"})

    peak = {"folio_kv_blocks_used": 0.0, "folio_kv_bytes_used": 0.0}
    done = threading.Event()

    def poll():
        while not done.is_set():
            try:
                t = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
                for k in peak:
                    v = metric(t, k)
                    if v is not None:
                        peak[k] = max(peak[k], v)
            except OSError:
                pass
            time.sleep(0.1)

    th = threading.Thread(target=poll)
    th.start()
    body = json.dumps(
        {
            "messages": messages,
            "max_tokens": a.max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    req = urllib.request.Request(
        base + "/v1/chat/completions", body, {"content-type": "application/json"}
    )
    t0 = time.time()
    text, usage = "", None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            for c in ev.get("choices", []):
                text += c.get("delta", {}).get("content") or ""
            usage = ev.get("usage") or usage
    done.set()
    th.join()
    final = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    print(
        json.dumps(
            {
                "prompt_tokens": usage and usage.get("prompt_tokens"),
                "completion_tokens": usage and usage.get("completion_tokens"),
                "seconds": round(time.time() - t0, 1),
                "peak_kv_blocks_used": peak["folio_kv_blocks_used"],
                "peak_kv_bytes_used": peak["folio_kv_bytes_used"],
                "kv_layers_per_block": metric(final, "folio_kv_layers_per_block"),
                "window_released_blocks_total": metric(
                    final, "folio_kv_window_released_blocks_total"
                ),
                "text": text,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
