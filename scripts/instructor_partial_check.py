#!/usr/bin/env python3
"""Checks that tool-call arguments stream: instructor's `create_partial` (pip install
instructor) over a forced tool call must yield several partial objects, the last one
complete, equal to the non-streamed answer.

Usage: instructor_partial_check.py [BASE_URL]   (default: $FOLIO_BASE_URL or http://127.0.0.1:8000/v1)
"""
import os
import sys

import instructor
from openai import OpenAI
from pydantic import BaseModel


class Weather(BaseModel):
    city: str
    days: int


def main() -> int:
    base_url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FOLIO_BASE_URL", "http://127.0.0.1:8000/v1")
    raw = OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "folio"))
    model = raw.models.list().data[0].id
    client = instructor.from_openai(raw, mode=instructor.Mode.TOOLS)
    ask = dict(
        model=model,
        response_model=Weather,
        messages=[{"role": "user", "content": "The weather in Paris for the next 3 days."}],
        max_tokens=64,
        temperature=0,
        max_retries=0,
    )
    partials = [p.model_dump() for p in client.chat.completions.create_partial(**ask)]
    distinct = [p for i, p in enumerate(partials) if i == 0 or p != partials[i - 1]]
    print(f"create_partial: {len(partials)} partials, {len(distinct)} distinct: {distinct}")
    assert len(distinct) > 1, distinct
    whole = client.chat.completions.create(**ask).model_dump()
    print(f"create: {whole}")
    assert distinct[-1] == whole, (distinct[-1], whole)
    print("instructor partial check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
