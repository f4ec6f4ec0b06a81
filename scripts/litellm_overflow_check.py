#!/usr/bin/env python3
"""litellm against `folio serve`: a too-long prompt is a ContextWindowExceededError (folio's
400 carries OpenAI's wording and code), and a Router with `context_window_fallbacks` falls
back on it. The fallback deployment answers with litellm's `mock_response`, so nothing but
the overflow's recognition is tested. Also sends llama-server's fields and an ignored field
with the plain OpenAI client and checks the Warning header.

usage: litellm_overflow_check.py http://127.0.0.1:PORT/v1
"""
import sys

import litellm
import openai

base = sys.argv[1]
client = openai.OpenAI(base_url=base, api_key="x")
served = client.models.list().data[0]
name = served.id
max_len = served.model_extra["max_model_len"]
long = "hi " * (max_len + 50)
msgs = [{"role": "user", "content": long}]

try:
    litellm.completion(model="openai/" + name, api_base=base, api_key="x", messages=msgs, max_tokens=4)
    sys.exit("a too-long prompt was accepted")
except litellm.ContextWindowExceededError as e:
    print("litellm ContextWindowExceededError:", str(e)[:160])

router = litellm.Router(
    model_list=[
        {"model_name": "small", "litellm_params": {"model": "openai/" + name, "api_base": base, "api_key": "x"}},
        {
            "model_name": "big",
            "litellm_params": {"model": "openai/" + name, "api_base": base, "api_key": "x", "mock_response": "fallback ok"},
        },
    ],
    context_window_fallbacks=[{"small": ["big"]}],
    num_retries=0,
)
r = router.completion(model="small", messages=msgs, max_tokens=4)
assert r.choices[0].message.content == "fallback ok", r
print("litellm Router context_window_fallbacks: fell back")

raw = client.chat.completions.with_raw_response.create(
    model=name,
    messages=[{"role": "user", "content": "Hi"}],
    max_tokens=8,
    seed=7,
    temperature=1.0,
    extra_body={
        "typical_p": 0.9, "dry_multiplier": 0.8, "xtc_probability": 0.5, "top_n_sigma": 2.0,
        "mirostat": 2, "samplers": ["penalties", "dry", "temperature"], "cache_prompt": True,
        "verbosity": "low",
    },
)
w = raw.headers.get("warning")
assert w == '299 folio "ignored fields: cache_prompt, verbosity"', w
print("openai client with llama-server fields: 200,", "Warning:", w)
