"""The official `openai` Python package against `quire serve` (run by tests/serve_real.rs).

usage: python openai_client.py BASE_URL MODEL
Prints one JSON line of findings; exits non-zero on the first failed expectation.
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor

import openai

BASE, MODEL = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=BASE, api_key="unused", max_retries=0, timeout=300)

GUIDE = (
    "You translate technical books from English into Simplified Chinese. Keep code, "
    "identifiers and product names in English. Keep Markdown markup exactly. Reply with "
    "the translation only, without notes."
)
LINES = [
    "The prefix cache stores the keys and values of the shared prompt.",
    "Each chapter is split into units that keep their Markdown structure.",
    "A checkpoint is written after every unit, so a crash loses nothing.",
    "The proofreading agent reviews flagged units and suggests fixes.",
]


def messages(line):
    return [{"role": "system", "content": GUIDE}, {"role": "user", "content": line}]


def chat(line, **kw):
    return client.chat.completions.create(
        model=MODEL, messages=messages(line), temperature=0, max_tokens=48, **kw
    )


def expect(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


found = {}

# The model list names the served model.
ids = [m.id for m in client.models.list().data]
expect(ids == [MODEL], f"models.list() gives {ids}")

# A whole reply, then a second request sharing the system prompt: its prefix is reused.
first = chat(LINES[0])
text0 = first.choices[0].message.content
expect(bool(text0.strip()), "the first reply is empty")
expect(first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0, "usage is missing")
second = chat(LINES[1])
cached = second.usage.prompt_tokens_details.cached_tokens
expect(cached > 0, f"no cached tokens on a request sharing the system prompt ({second.usage})")
found["cached_tokens_second"] = cached
found["prompt_tokens_second"] = second.usage.prompt_tokens

# Streaming gives the same greedy text, chunk by chunk, then the usage.
chunks, usage = [], None
for chunk in chat(LINES[0], stream=True, stream_options={"include_usage": True}):
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        if choice.delta.content:
            chunks.append(choice.delta.content)
expect("".join(chunks) == text0, f"stream {''.join(chunks)!r} != whole {text0!r}")
expect(len(chunks) > 1, "the stream came in one piece")
expect(usage is not None and usage.completion_tokens > 0, "no usage chunk at the end of the stream")
found["stream_chunks"] = len(chunks)

# Four concurrent clients (decoded together) get the replies each gets alone.
alone = [chat(line).choices[0].message.content for line in LINES]
with ThreadPoolExecutor(4) as pool:
    together = list(pool.map(lambda l: chat(l).choices[0].message.content, LINES))
expect(together == alone, f"concurrent replies differ from sequential ones: {together} vs {alone}")
found["concurrent_identical"] = True

# Bad requests are 4xx errors the SDK raises as such.
try:
    client.chat.completions.create(model=MODEL, messages=messages("x"), temperature=5)
    expect(False, "temperature=5 was accepted")
except openai.BadRequestError as e:
    expect("temperature" in str(e), f"the error does not name temperature: {e}")
try:
    client.chat.completions.create(model="no-such-model", messages=messages("x"))
    expect(False, "an unknown model was accepted")
except openai.NotFoundError:
    pass
found["errors"] = "ok"
found["sample"] = text0
print(json.dumps(found, ensure_ascii=False))
