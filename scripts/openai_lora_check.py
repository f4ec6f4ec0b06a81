#!/usr/bin/env python3
"""Checks folio's LoRA serving with the official `openai` Python client (pip install openai).

Loads two adapters at runtime (vLLM's POST /v1/load_lora_adapter), selects them by model
name, checks /v1/models lists them with their parent, that an unknown adapter is a 404
naming it, unloads and re-loads one (same greedy output after), then runs 50 streaming chat
completions at once mixing both adapters and the base model, and checks that they all
finish and the KV and adapter slots are idle afterwards (/metrics).

Usage: openai_lora_check.py BASE_URL ADAPTER_A.gguf ADAPTER_B.gguf
  (adapters as `folio lora random --seed N --out FILE` writes them)
"""
import json
import os
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
from openai import OpenAI

KEY = os.environ.get("OPENAI_API_KEY", "folio")


def post(base, path, body):
    req = urllib.request.Request(
        base.rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise SystemExit(f"metric {name} missing")


def main() -> int:
    base, a_path, b_path = sys.argv[1], sys.argv[2], sys.argv[3]
    root = base.rstrip("/").removesuffix("/v1")
    client = OpenAI(base_url=base, api_key=KEY)
    served = client.models.list().data[0].id

    for name, path in (("poet-a", a_path), ("poet-b", b_path)):
        status, text = post(base, "/load_lora_adapter", {"lora_name": name, "lora_path": os.path.abspath(path)})
        assert status == 200, (status, text)
        print(f"load {name}: {text}")
    models = {m.id: m for m in client.models.list().data}
    assert set(models) == {served, "poet-a", "poet-b"}, models
    assert getattr(models["poet-a"], "parent", None) == served, models["poet-a"]

    def ask(model, **kw):
        r = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Write a haiku about the sea."}],
            max_tokens=16,
            temperature=0,
            **kw,
        )
        assert r.model == model, (r.model, model)
        return r.choices[0].message.content

    base_text, a_text, b_text = ask(served), ask("poet-a"), ask("poet-b")
    print(f"base {base_text!r}\npoet-a {a_text!r}\npoet-b {b_text!r}")
    assert a_text != base_text and b_text != a_text, "the adapters do not change the output"

    try:
        ask("poet-z")
        raise SystemExit("unknown adapter was accepted")
    except openai.NotFoundError as e:
        assert "poet-z" in str(e), e
        print(f"unknown adapter: 404 {e.message!r}")

    status, text = post(base, "/unload_lora_adapter", {"lora_name": "poet-a"})
    assert status == 200, (status, text)
    try:
        ask("poet-a")
        raise SystemExit("unloaded adapter still served")
    except openai.NotFoundError:
        pass
    status, text = post(base, "/load_lora_adapter", {"lora_name": "poet-a", "lora_path": os.path.abspath(a_path)})
    assert status == 200, (status, text)
    assert ask("poet-a") == a_text, "re-loaded adapter gives another output"
    print("unload + re-load: same output")

    def stream(i):
        model = [served, "poet-a", "poet-b"][i % 3]
        s = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"Count to {i % 7 + 2}."}],
            max_tokens=12,
            temperature=0.7,
            seed=i,
            stream=True,
        )
        finish, text = None, []
        for chunk in s:
            for c in chunk.choices:
                text.append(c.delta.content or "")
                finish = c.finish_reason or finish
        assert finish in ("stop", "length"), (i, finish)
        return model

    with ThreadPoolExecutor(max_workers=50) as ex:
        done = list(ex.map(stream, range(50)))
    assert len(done) == 50
    with urllib.request.urlopen(root + "/metrics", timeout=30) as r:
        m = r.read().decode()
    assert metric(m, "vllm:num_requests_running") == 0, "requests still running"
    assert metric(m, "folio_kv_blocks_used") == 0, "KV blocks still in use"
    assert metric(m, "folio_lora_slots_used") == 2, "adapter slots not idle"
    with urllib.request.urlopen(root + "/lora-adapters", timeout=30) as r:
        adapters = json.loads(r.read())
    assert all(a["in_use"] == 0 for a in adapters), adapters
    print(f"50 mixed-adapter streams: all finished; requests per adapter {[(a['name'], a['requests']) for a in adapters]}")
    print("openai lora check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
