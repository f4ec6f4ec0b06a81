#!/usr/bin/env python3
"""The official `openai` client through vllm-router in front of folio replicas.

Streams a chat completion (usage must arrive) and runs a completion through the router.
With --expect-affinity (the kv_aware policy and folio's KV events), each of two long
shared prefixes is sent several times: every repeat must land on the replica that
already holds the prefix (counted from each replica's vllm:request_success_total) and
be served from its prefix cache (usage.prompt_tokens_details.cached_tokens).

Usage: openai_router_check.py [--expect-affinity]
Environment: FOLIO_ROUTER_URL, FOLIO_REPLICA_URLS (set by scripts/cluster.sh).
"""
import os
import re
import sys
import time
import urllib.request

from openai import OpenAI


def served(replica: str) -> float:
    """Requests the replica finished so far."""
    text = urllib.request.urlopen(f"{replica}/metrics", timeout=10).read().decode()
    return sum(float(m) for m in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M))


def main() -> int:
    router = os.environ["FOLIO_ROUTER_URL"]
    replicas = os.environ["FOLIO_REPLICA_URLS"].split(",")
    affinity = "--expect-affinity" in sys.argv[1:]
    client = OpenAI(base_url=f"{router}/v1", api_key=os.environ.get("OPENAI_API_KEY", "folio"))
    model = client.models.list().data[0].id
    print(f"router {router}, replicas {replicas}, model {model}")

    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say hello in five words."}],
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                text.append(c.delta.content)
    print(f"stream through the router: {''.join(text)!r} usage={usage}")
    assert text and usage is not None and usage.completion_tokens > 0, (text, usage)

    comp = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
    print(f"completion through the router: {comp.choices[0].text!r}")
    assert comp.usage.completion_tokens > 0, comp

    if affinity:
        words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
        for p in range(2):
            prefix = " ".join(words[(i * 7 + p * 3) % len(words)] for i in range(300))
            before = [served(r) for r in replicas]
            cached = []
            for k in range(4):
                r = client.completions.create(
                    model=model, prompt=f"{prefix} question {p}.{k}:", max_tokens=2, temperature=0
                )
                details = r.usage.prompt_tokens_details
                cached.append(details.cached_tokens if details else 0)
                # Events reach the router asynchronously; give them a moment.
                time.sleep(0.3)
            delta = [served(r) - b for r, b in zip(replicas, before)]
            print(f"prefix {p}: requests per replica {delta}, cached prompt tokens {cached}")
            assert sorted(delta)[-1] == 4, f"prefix {p}: the 4 requests were split over replicas: {delta}"
            assert all(c and c > 0 for c in cached[1:]), f"prefix {p}: repeats missed the cache: {cached}"
    print("openai client through vllm-router: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
