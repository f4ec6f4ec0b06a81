#!/usr/bin/env python3
"""Fault and fuzz suite for `folio serve` and the GGUF loader (Python 3 standard library only).

Starts its own servers on loopback ports 18900-18909, seeded and bounded in count and time,
and runs eight cases:

  fuzz        HTTP/JSON fuzzing of every route: malformed JSON, wrong types for every known
              field, huge numbers, unicode, bad methods and headers, broken framing.
              Zero 5xx other than 501/503, zero resets or hangs, server answers after.
  gguf        Truncates the default model's GGUF at header field boundaries and overwrites
              counts, lengths, versions, types, dims and offsets; `folio generate` on each
              must exit non-zero with a message naming the field, never panic or die by signal.
  grammar     Grammar and schema bombs (700-rule Lark and GBNF chains, a 300-deep $defs
              schema, an 8,000-property object, ten huge grammars at once) beside a stream:
              400 or 200, server alive, the stream's worst inter-token gap under 1 s.
  disk-kill   SIGKILL while blocks spill to the disk KV tier, restart on the same directory:
              greedy outputs equal a fresh server's.
  sigterm     SIGTERM with streams in flight: every stream ends with a finish reason and
              [DONE], the process exits 0 within the bound.
  slow-read   20 streams read very slowly: peak RSS under the bound, idle again after.
  disconnect  200 streams with seeded disconnects (mid-headers, mid-body, after k events):
              no KV blocks held once idle.
  crosstalk   50 concurrent marker prompts (prefix cache on, n > 1, two LoRA adapters and the
              base picked by `model`): every output equals the same request run alone.

Every case also checks the server log for `panicked`. Prints one row per case and ends with
"N passed, M failed"; exits non-zero when any case failed.

Usage: fault_suite.py [FOLIO_BIN] [--only CASE,CASE] [--keep DIR]
"""
import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

BIN = "./target/release/folio"
PORT0 = 18900
RSS_BOUND_MB = 600
HOST = "127.0.0.1"
WORK = None  # temporary directory, set in main
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STARTED = []  # every server started, stopped at the end of its case whatever happens


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- server


class Server:
    """One `folio serve` on loopback; its combined output goes to a log file."""

    def __init__(self, name, port, args=()):
        self.name, self.port, self.args = name, port, list(args)
        self.log_path = os.path.join(WORK, f"{name}.log")
        self.proc = None

    def start(self, timeout=60):
        STARTED.append(self)
        if self.health() is not None:
            raise RuntimeError(f"{self.name}: port {self.port} already answers (a stray server?)")
        logf = open(self.log_path, "wb" if self.proc is None else "ab")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--host", HOST, "--port", str(self.port), *self.args],
            stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name}: server exited with {self.proc.returncode}: "
                                   + self.log_tail())
            if self.health() == 200:
                return self
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: server not healthy within {timeout} s")

    def health(self):
        try:
            return simple_request(self.port, "GET", "/health", timeout=2)[0]
        except OSError:
            return None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def rss_mb(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def metrics(self):
        st, body = simple_request(self.port, "GET", "/metrics", timeout=10)
        out = {}
        for line in body.decode(errors="replace").splitlines():
            if line.startswith("#") or " " not in line:
                continue
            name, val = line.rsplit(" ", 1)
            try:
                out.setdefault(name, float(val))
            except ValueError:
                pass
        return out

    def wait_idle(self, timeout=30):
        """Until nothing runs or waits; returns the last metrics."""
        deadline = time.time() + timeout
        m = {}
        while time.time() < deadline:
            m = self.metrics()
            if m.get("folio_requests_running", 1) == 0 and m.get("folio_requests_waiting", 1) == 0:
                return m
            time.sleep(0.2)
        return m

    def signal(self, sig):
        if self.alive():
            os.kill(self.proc.pid, sig)

    def stop(self, timeout=30):
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        if self.proc is None:
            return None
        if self.alive():
            self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.proc.wait(10)

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return ANSI.sub("", f.read().decode(errors="replace"))
        except OSError:
            return ""

    def log_tail(self, n=1500):
        return self.log_text()[-n:]

    def panics(self):
        """Panics and aborts (a stack overflow is "fatal runtime error") in the log."""
        t = self.log_text()
        return t.count("panicked") + t.count("fatal runtime error")


def simple_request(port, method, path, body=None, timeout=30, headers=None):
    """Blocking request on a fresh connection; returns (status, body)."""
    return asyncio.run(_simple(port, method, path, body, timeout, headers))


async def _simple(port, method, path, body, timeout, headers):
    r = await http(port, method, path, body, timeout=timeout, headers=headers)
    return r["status"], r["body"]


# --------------------------------------------------------------------------- HTTP client


def build_request(port, method, path, body=None, headers=None, content_type="application/json"):
    if body is not None and not isinstance(body, (bytes, bytearray)):
        body = json.dumps(body).encode()
    h = {"Host": f"{HOST}:{port}", "Connection": "close"}
    if body is not None:
        h["Content-Length"] = str(len(body))
        if content_type:
            h["Content-Type"] = content_type
    h.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in h.items() if v is not None) + "\r\n"
    return head.encode() + (body or b"")


async def http(port, method, path, body=None, *, headers=None, raw=None, timeout=30,
               on_event=None, half_close=False, rcvbuf=None, slow_read=None):
    """One HTTP/1.1 exchange on a new connection.

    Returns {status, headers, body, events: [(t, data)], error}; error is None, "reset"
    (connection reset or closed without a status line), "timeout", or "cancelled" (when
    `on_event` returned False and the client closed). SSE `data:` events are parsed from
    the body as it arrives; `slow_read=(bytes, seconds)` reads that many bytes per period.
    """
    res = {"status": None, "headers": {}, "body": b"", "events": [], "error": None}
    conn = {}
    try:
        await asyncio.wait_for(_exchange(res, conn, port, method, path, body, headers, raw,
                                         on_event, half_close, rcvbuf, slow_read), timeout)
    except asyncio.TimeoutError:
        res["error"] = "timeout"
    except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
        res["error"] = "reset"
    except OSError as e:  # refused: nothing listens (the server died)
        res["error"] = f"refused ({e.errno})"
    except (ValueError, IndexError):
        res["error"] = "malformed"
    finally:
        if conn.get("writer") is not None:
            conn["writer"].close()
    return res


async def _exchange(res, conn, port, method, path, body, headers, raw, on_event, half_close,
                rcvbuf, slow_read):
    if rcvbuf:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (HOST, port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 22)
    else:
        reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 22)
    conn["writer"] = writer
    if raw is not None:
        method = raw.split(b" ", 1)[0].decode(errors="replace")
    writer.write(raw if raw is not None else build_request(port, method, path, body, headers))
    await writer.drain()
    if half_close and writer.can_write_eof():
        writer.write_eof()

    async def read(n):
        if slow_read:
            await asyncio.sleep(slow_read[1])
            n = min(n, slow_read[0]) if n > 0 else slow_read[0]
        return await reader.read(n)

    buf = b""
    while True:  # interim 1xx responses (Expect: 100-continue) come first
        while b"\r\n\r\n" not in buf:
            chunk = await reader.read(65536)
            if not chunk:
                res["error"] = "reset"
                return res
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode(errors="replace").split("\r\n")
        res["status"] = int(lines[0].split()[1])
        if not 100 <= res["status"] < 200:
            break
        res["status"] = None
    rest = buf
    for line in lines[1:]:
        k, _, v = line.partition(":")
        res["headers"][k.strip().lower()] = v.strip()
    if method == "HEAD" or res["status"] in (204, 304):
        return res
    chunked = "chunked" in res["headers"].get("transfer-encoding", "").lower()
    clen = res["headers"].get("content-length")
    sse = b""
    body = bytearray()
    def feed(data):
        nonlocal sse
        body.extend(data)
        if not (on_event or "text/event-stream" in res["headers"].get("content-type", "")):
            return True
        sse += data
        while b"\n\n" in sse:
            ev, sse = sse.split(b"\n\n", 1)
            for ln in ev.split(b"\n"):
                if ln.startswith(b"data:"):
                    d = ln[5:].strip().decode(errors="replace")
                    res["events"].append((time.monotonic(), d))
                    if on_event and on_event(d) is False:
                        return False
        return True

    if chunked:
        pending = rest
        while True:
            while b"\r\n" not in pending:
                more = await read(65536)
                if not more:
                    res["error"] = "reset"
                    return res
                pending += more
            size_line, pending = pending.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            while len(pending) < size + 2:
                more = await read(max(65536, size + 2 - len(pending)))
                if not more:
                    res["error"] = "reset"
                    return res
                pending += more
            if not feed(pending[:size]):
                res["error"] = "cancelled"
                return res
            pending = pending[size + 2:]
    elif clen is not None:
        need = int(clen) - len(rest)
        data = rest
        while need > 0:
            more = await read(min(need, 1 << 20))
            if not more:
                res["error"] = "reset"
                return res
            data += more
            need -= len(more)
        feed(data)
    else:
        data = rest
        while True:
            more = await read(65536)
            if not more:
                break
            data += more
        feed(data)
    res["body"] = bytes(body)



def text_of(choice):
    if "text" in choice:
        return choice.get("text") or ""
    m = choice.get("message") or choice.get("delta") or {}
    return m.get("content") or ""


def stream_texts(events):
    """Texts by choice index, the finish reasons seen and whether [DONE] came."""
    texts, finish, done = {}, {}, False
    for _, d in events:
        if d == "[DONE]":
            done = True
            continue
        try:
            obj = json.loads(d)
        except ValueError:
            continue
        for ch in obj.get("choices") or []:
            i = ch.get("index", 0)
            texts[i] = texts.get(i, "") + text_of(ch)
            if ch.get("finish_reason"):
                finish[i] = ch["finish_reason"]
    return texts, finish, done


# --------------------------------------------------------------------------- rows


class Row:
    def __init__(self, name):
        self.name = name
        self.requests = self.faults = self.panics = self.leaks = self.wrong = 0
        self.notes = []
        self.secs = 0.0
        self.error = None

    def note(self, s):
        self.notes.append(s)

    def fail(self, s):
        self.wrong += 1
        self.notes.append("FAIL: " + s)

    @property
    def passed(self):
        return self.error is None and self.panics == 0 and self.leaks == 0 and self.wrong == 0


def finish_server(row, srv, expect_rc=None):
    """Stops `srv`, adds its panics to the row."""
    rc = srv.stop()
    p = srv.panics()
    if p:
        row.panics += p
        m = re.search(r"(panicked at|has overflowed|fatal runtime)[^\n]*\n?[^\n]*", srv.log_text())
        row.note("panic: " + (m.group(0).replace("\n", " ")[:200] if m else "?"))
    if expect_rc is not None and rc != expect_rc:
        row.fail(f"{srv.name} exited with {rc}")
    return rc


# --------------------------------------------------------------------------- case 1: fuzz

WRONG_VALUES = [
    None, True, False, 0, -1, 1, 7, 2**31, 2**53 + 1, 2**63, 2**64 + 5, -2**63 - 1, 10**40,
    1e308, -1e308, 0.5, -0.0, 5e-324, "", "x", "ü" * 3, "\u202e\U0001F600\u0000",
    "A" * 5000, [], [1, "a", None], [""] * 64, {}, {"a": {"b": [{}]}}, [[[[[[[]]]]]]],
    {"type": "json_schema"}, [{"role": "user"}], [{"id": 0, "scale": 1e9}],
]

GEN_FIELDS = [
    "model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k",
    "min_p", "n", "best_of", "seed", "stop", "stop_token_ids", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "logprobs", "logit_bias", "min_tokens",
    "allowed_token_ids", "bad_words", "ignore_eos", "user", "response_format",
    "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "grammar", "json_schema", "lora", "speculative", "num_speculative_tokens", "deadline_ms",
    "metadata", "store", "service_tier", "priority", "no_such_field",
]
CHAT_FIELDS = ["messages", "max_completion_tokens", "top_logprobs", "add_generation_prompt",
               "chat_template_kwargs", "tools", "tool_choice", "parallel_tool_calls"]
COMPLETION_FIELDS = ["prompt", "echo", "suffix"]

ROUTES = {
    "/v1/completions": ({"prompt": "Hello", "max_tokens": 4}, GEN_FIELDS + COMPLETION_FIELDS),
    "/v1/chat/completions": ({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
                             GEN_FIELDS + CHAT_FIELDS),
    "/v1/completions/render": ({"prompt": "Hello"}, GEN_FIELDS + COMPLETION_FIELDS),
    "/v1/chat/completions/render": ({"messages": [{"role": "user", "content": "Hi"}]},
                                    GEN_FIELDS + CHAT_FIELDS),
    "/v1/responses": ({"input": "Hi", "max_output_tokens": 4},
                      ["input", "instructions", "max_output_tokens", "temperature", "top_p",
                       "stream", "text", "reasoning", "tools", "tool_choice", "store",
                       "previous_response_id", "model", "metadata", "truncation", "include"]),
    "/v1/embeddings": ({"input": "hello"}, ["input", "model", "encoding_format", "dimensions",
                                            "pooling", "user"]),
    "/v1/load_lora_adapter": ({"lora_name": "fz", "lora_path": "/nonexistent/x.gguf"},
                              ["lora_name", "lora_path", "scale"]),
    "/v1/unload_lora_adapter": ({"lora_name": "fz"}, ["lora_name"]),
    "/tokenize": ({"prompt": "hello"}, ["prompt", "messages", "add_special_tokens", "model"]),
    "/detokenize": ({"tokens": [1, 2, 3]}, ["tokens", "model"]),
}
GET_ROUTES = ["/v1/models", "/v1/models/SmolLM2-135M-Instruct.Q4_1", "/v1/models/a",
              "/v1/models/org/none", "/lora-adapters", "/health", "/metrics"]
UNIMPLEMENTED = ["/v1/audio/speech", "/v1/batches/b1", "/v1/moderations", "/v1/assistants",
                 "/v1/images/generations", "/v1/files", "/v1/responses/resp_1"]
METHODS = ["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "FOO", "GET", "POST"]


def fuzz_requests(rng, port, n):
    """`n` seeded (label, raw bytes, half_close, allowed statuses or None) requests."""
    out = []
    paths = list(ROUTES)

    def add(label, raw, half=False, allowed=None):
        out.append((label, raw, half, allowed))

    while len(out) < n:
        k = rng.random()
        path = rng.choice(paths)
        base, fields = ROUTES[path]
        if k < 0.45:  # one field with a wrong value
            body = dict(base)
            body[rng.choice(fields)] = rng.choice(WRONG_VALUES)
            if rng.random() < 0.3:  # and a second
                body[rng.choice(fields)] = rng.choice(WRONG_VALUES)
            add("field", build_request(port, "POST", path, json.dumps(body).encode()))
        elif k < 0.60:  # malformed JSON
            good = json.dumps(base)
            bodies = [
                good[: rng.randrange(len(good))], "", "null", "[]", '"str"', "123", "{",
                "[" * 100000, '{"a":' * 20000, good.replace("{", "{" + '"prompt":1,', 1),
                "\ufeff" + good, good + "garbage", "{" + " " * 200000 + "}",
                '{"prompt": "\\ud800\\udc00\\ud800"}', '{"prompt": 1' + "0" * 5000 + "}",
                '{"max_tokens": NaN}', '{"max_tokens": Infinity}', '{"n": -0}',
                good.replace('"', "'"),
            ]
            b = rng.choice(bodies).encode("utf-8", "surrogatepass")
            if rng.random() < 0.2:
                b = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
            if rng.random() < 0.1:
                b = good.encode()[:-2] + b"\xff\xfe\"}"
            add("json", build_request(port, "POST", path, b))
        elif k < 0.70:  # a bad method on a known route
            p = rng.choice(paths + GET_ROUTES)
            add("method", build_request(port, rng.choice(METHODS), p,
                                        json.dumps(base).encode() if rng.random() < 0.5 else None))
        elif k < 0.75:  # GET routes, 501 routes, unknown paths
            p = rng.choice(GET_ROUTES + UNIMPLEMENTED + ["/nope", "/v1/" + "a" * 3000, "/%00",
                                                         "/v1/models/%ff%fe", "//v1//models"])
            add("route", build_request(port, rng.choice(["GET", "POST"]), p,
                                       b"{}" if rng.random() < 0.5 else None))
        else:  # headers and framing
            body = json.dumps(base).encode()
            pick = rng.randrange(15)
            if pick == 0:
                raw = build_request(port, "POST", path, body, content_type="text/plain")
            elif pick == 1:
                raw = build_request(port, "POST", path, body, content_type=None)
            elif pick == 2:
                raw = build_request(port, "POST", path, body, headers={"Host": "evil.example"})
            elif pick == 3:  # duplicate Host: must be 400
                raw = build_request(port, "POST", path, body).replace(
                    b"\r\n\r\n", b"\r\nHost: evil.example\r\n\r\n", 1)
                add("dup-host", raw, allowed={400})
                continue
            elif pick == 4:  # absolute-form target naming another authority than Host: 400
                # (RFC 9112 3.2.2: one that agrees with Host is served as usual.)
                raw = build_request(port, "POST", f"http://evil.example{path}", body)
                add("absolute-form", raw, allowed={400})
                continue
            elif pick == 5:  # a Content-Length far above --max-request-bytes: 413
                raw = build_request(port, "POST", path, b"", headers={
                    "Content-Length": str(rng.choice([10**12, 2**40, 40 << 20]))})
                add("huge-length", raw, half=True, allowed={413})
                continue
            elif pick == 6:  # shorter body than declared, then EOF
                raw = build_request(port, "POST", path, body, headers={
                    "Content-Length": str(len(body) + rng.randrange(1, 1000))})
                add("short-body", raw, half=True)
                continue
            elif pick == 7:
                raw = build_request(port, "POST", path, body, headers={
                    "Content-Length": rng.choice(["-1", "abc", "1e3", "99999999999999999999999"])})
            elif pick == 8:
                raw = build_request(port, "POST", path, body, headers={
                    "X-Big": "v" * rng.choice([1000, 100000])})
            elif pick == 9:
                hs = "".join(f"X-H{i}: {i}\r\n" for i in range(rng.choice([50, 500])))
                raw = build_request(port, "POST", path, body).replace(
                    b"\r\n\r\n", b"\r\n" + hs.encode() + b"\r\n", 1)
            elif pick == 10:  # chunked with a broken chunk size
                raw = (f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: "
                       "application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                       f"{len(body) + 7:x}\r\n").encode() + body + b"\r\nzz\r\n\r\n"
                add("bad-chunked", raw, half=True)
                continue
            elif pick == 11:
                raw = build_request(port, "POST", path, body, headers={
                    "Authorization": "Bearer " + "\u00e9" * 10, "Expect": "100-continue"})
            elif pick == 12:
                raw = rng.choice([b"GARBAGE\r\n\r\n", b"POST\r\n\r\n", b"\x00\x01\x02\r\n\r\n",
                                  b"GET / HTTP/9.9\r\n\r\n", b"GET /health HTTP/1.1\r\n\r\n",
                                  b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"])
                add("bad-request-line", raw)
                continue
            elif pick == 13:
                raw = build_request(port, "POST", path, body,
                                    content_type="application/json; charset=utf-16")
            else:
                raw = build_request(port, "POST", path, body, headers={
                    "Content-Encoding": "gzip", "Accept": "text/event-stream"})
            add("header", raw)
    return out


def case_fuzz(row, rng):
    srv = Server("fuzz", PORT0, ["--request-timeout-s", "5", "--max-request-bytes", "32m"]).start()
    reqs = fuzz_requests(rng, srv.port, 3000)
    statuses = {}
    bad = []

    async def go():
        sem = asyncio.Semaphore(8)

        async def one(label, raw, half, allowed):
            async with sem:
                r = await http(srv.port, "POST", "", raw=raw, half_close=half, timeout=20)
            st = r["status"]
            statuses[st] = statuses.get(st, 0) + 1
            problem = None
            if r["error"] == "timeout":
                problem = "hang"
            elif st is None:
                problem = "reset"
            elif st >= 500 and st not in (501, 503):
                problem = f"status {st}"
            elif allowed and st not in allowed:
                problem = f"status {st}, want {sorted(allowed)}"
            if problem:
                bad.append((label, problem, raw[:100]))

        await asyncio.gather(*(one(*q) for q in reqs))

    asyncio.run(go())
    row.requests = len(reqs)
    row.faults = len(reqs)
    byproblem = {}
    for label, problem, raw in bad:
        key = f"{label}: {problem}"
        cnt, first = byproblem.get(key, (0, raw))
        byproblem[key] = (cnt + 1, first)
    for key, (cnt, first) in sorted(byproblem.items()):
        row.fail(f"{cnt}x {key} (e.g. {first[:60]!r})")
    row.note("statuses " + ", ".join(f"{k}:{v}" for k, v in sorted(statuses.items(), key=str)))
    # Still serving: a correct request answers.
    if not srv.alive():
        row.fail("server died")
    else:
        st, body = simple_request(srv.port, "POST", "/v1/completions",
                                  {"prompt": "The capital of France is", "max_tokens": 4,
                                   "temperature": 0})
        if st != 200 or not json.loads(body)["choices"][0]["text"]:
            row.fail(f"correct request after fuzzing got {st}")
    finish_server(row, srv)


# --------------------------------------------------------------------------- case 2: gguf


def model_path():
    out = subprocess.run([BIN, "models"], capture_output=True, text=True, timeout=60).stdout
    for line in out.splitlines():
        if "(default)" in line:
            return next(w for w in line.split() if w.endswith(".gguf"))
    raise RuntimeError("no default model in `folio models`")


def gguf_fields(data):
    """Walks a GGUF header: [(offset, size, label, kind)] with kind in count/len/type/
    version/dims/offset/value, plus the data section start."""
    fields = []
    pos = 0

    def take(size, label, kind):
        nonlocal pos
        fields.append((pos, size, label, kind))
        v = data[pos:pos + size]
        pos += size
        return v

    def u32(label, kind):
        return struct.unpack("<I", take(4, label, kind))[0]

    def u64(label, kind):
        return struct.unpack("<Q", take(8, label, kind))[0]

    def string(label, record=True):
        nonlocal pos
        if record:
            n = u64(label + " length", "len")
            take(n, label, "value")
        else:
            n = struct.unpack("<Q", data[pos:pos + 8])[0]
            pos += 8 + n
        return data[pos - n:pos]

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    take(4, "magic", "magic")
    u32("version", "version")
    nt = u64("tensor count", "count")
    nkv = u64("metadata count", "count")
    alignment = 32
    for i in range(nkv):
        key = string(f"key[{i}]").decode()
        ty = u32(f"{key} type", "type")
        if ty == 8:
            string(f"{key} value")
        elif ty == 9:
            et = u32(f"{key} element type", "type")
            n = u64(f"{key} array length", "count")
            if et == 8:
                for j in range(n):
                    string(f"{key}[{j}]", record=j in (0, n - 1))
            else:
                take(n * sizes[et], f"{key} elements", "value")
        else:
            v = take(sizes[ty], f"{key} value", "value")
            if key == "general.alignment":
                alignment = struct.unpack("<I", v)[0]
    for i in range(nt):
        name = string(f"tensor[{i}] name").decode()
        nd = u32(f"{name} n_dims", "dims")
        for d in range(nd):
            u64(f"{name} dim{d}", "dims")
        u32(f"{name} type", "type")
        u64(f"{name} offset", "offset")
    data_start = (pos + alignment - 1) // alignment * alignment
    return fields, data_start


FIELD_WORDS = re.compile(r"byte \d+|key|tensor|version|magic|count|dim|offset|align|type|"
                         r"truncat|length|gguf|field|block", re.I)


def run_loader(path):
    """(exit code, stderr) of `folio generate` on `path`."""
    try:
        p = subprocess.run([BIN, "generate", "--model", path, "--prompt", "hi",
                            "--max-tokens", "1", "--threads", "1"],
                           capture_output=True, timeout=60)
        return p.returncode, ANSI.sub("", p.stderr.decode(errors="replace"))
    except subprocess.TimeoutExpired:
        return "timeout", ""


def case_gguf(row, rng):
    src = model_path()
    size = os.path.getsize(src)
    with open(src, "rb") as f:
        head = f.read(8 << 20)
    fields, data_start = gguf_fields(head)
    assert data_start < len(head), "header larger than 8 MiB"
    row.note(f"header {data_start} bytes, {len(fields)} fields walked")
    mutants = []  # (label, kind, must_reject, patch (offset, bytes) or truncation length)
    # Truncations at field boundaries: every one of the first fields, a sample of the rest,
    # the tensor index's ends, inside the data section.
    cuts = sorted({f[0] for f in fields[:24]} | {f[0] + f[1] for f in fields[:12]}
                  | {f[0] for f in rng.sample(fields, min(30, len(fields)))}
                  | {fields[-1][0], fields[-1][0] + 4, data_start, data_start + 4096,
                     size - 1} | {0, 3})
    for c in cuts:
        label = next((f[2] for f in fields if f[0] <= c < f[0] + max(f[1], 1)), "data")
        mutants.append((f"truncate at {c} ({label})", "trunc", True, c))
    # Overwrites of counts, lengths, versions, types, dims and offsets.
    big64 = [2**64 - 1, 2**63, 2**40, 0]
    by_kind = {}
    for f in fields:
        by_kind.setdefault(f[3], []).append(f)
    for kind, values, must in [
        ("version", [1, 0, 4, 2**32 - 1], True),
        ("count", big64 + ["+1", "-1"], False),
        ("len", big64 + ["+1"], False),
        ("type", [13, 2**32 - 1, 255, 9], False),
        ("dims", [0, 5, 2**32 - 1, 2**62, "+1"], False),
        ("offset", [2**64 - 1, size, 1, "+1"], False),
        ("magic", [b"GGUG", b"\0\0\0\0"], True),
    ]:
        pool = by_kind.get(kind, [])
        picks = pool[:3] + rng.sample(pool[3:], min(5, max(0, len(pool) - 3)))
        for v in values:
            f = rng.choice(picks)
            off, sz = f[0], f[1]
            if isinstance(v, bytes):
                new = v
            else:
                old = int.from_bytes(head[off:off + sz], "little")
                nv = old + 1 if v == "+1" else old - 1 if v == "-1" else v
                new = (nv % (1 << (8 * sz))).to_bytes(sz, "little")
            # Lowering a count or a bigger dim may still describe a readable file; huge
            # values and invalid versions/types may not be accepted.
            strict = must or (isinstance(v, int) and v >= 2**40) or (kind == "type" and v != 9)
            mutants.append((f"{f[2]} := {v}", kind, strict, (off, new)))
    # Seeded single-byte flips anywhere in the header.
    for _ in range(20):
        f = rng.choice(fields)
        off = f[0] + rng.randrange(max(f[1], 1))
        mutants.append((f"flip byte {off} ({f[2]})", "flip", False,
                        (off, bytes([head[off] ^ (1 << rng.randrange(8))]))))

    full = os.path.join(WORK, "mutant-full.gguf")
    shutil.copyfile(src, full)
    trunc = os.path.join(WORK, "mutant-trunc.gguf")
    outcomes = {}
    for label, kind, must, m in mutants:
        row.requests += 1
        row.faults += 1
        if kind == "trunc":
            with open(trunc, "wb") as f:
                f.write(head[:m] if m <= len(head) else head)
                if m > len(head):
                    with open(src, "rb") as s:
                        s.seek(len(head))
                        f.write(s.read(m - len(head)))
            rc, err = run_loader(trunc)
        else:
            off, new = m
            with open(full, "r+b") as f:
                f.seek(off)
                f.write(new)
            rc, err = run_loader(full)
            with open(full, "r+b") as f:
                f.seek(off)
                f.write(head[off:off + len(new)])
        if "panicked" in err:
            row.panics += 1
            outcome = "panic"
            row.note(f"panic on {label}: " + err[err.find("panicked"):][:160].replace("\n", " "))
        elif rc == "timeout":
            outcome = "timeout"
            row.fail(f"timeout on {label}")
        elif rc < 0:
            outcome = f"signal {-rc}"
            row.fail(f"signal {-rc} on {label}")
        elif rc == 0:
            outcome = "accepted"
            if must:
                row.fail(f"accepted {label}")
        elif not FIELD_WORDS.search(err):
            outcome = "vague error"
            row.fail(f"error without a field on {label}: {err.strip()[-160:]!r}")
        else:
            outcome = "rejected"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    row.note("outcomes " + ", ".join(f"{k}:{v}" for k, v in sorted(outcomes.items())))


# --------------------------------------------------------------------------- case 3: grammar


def lark_chain(n, tag):
    return "start: r0\n" + "".join(f"r{i}: r{i + 1}\n" for i in range(n - 1)) + f'r{n - 1}: "{tag}"\n'


def gbnf_chain(n, tag):
    return "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(n - 1)) + f'r{n - 1} ::= "{tag}"\n'


def deep_defs(n):
    defs = {f"d{i}": {"type": "object", "properties": {"v": {"$ref": f"#/$defs/d{i + 1}"}},
                      "required": ["v"]} for i in range(n - 1)}
    defs[f"d{n - 1}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def wide_object(n):
    return {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)},
            "required": [f"p{i}" for i in range(n)]}


def chat(content, **kw):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 8}
    body.update(kw)
    return body


async def long_stream(port, state, max_tokens=3000, timeout=120):
    """A completions stream of `max_tokens`; records event times; stops when state['stop']."""
    def on_event(d):
        return not state.get("stop")

    r = await http(port, "POST", "/v1/completions",
                   {"prompt": "Write a long story about a lighthouse keeper.",
                    "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0,
                    "stream": True}, timeout=timeout, on_event=on_event)
    state["result"] = r
    return r


def worst_gap(events, t_from, t_to):
    ts = [t for t, _ in events if t_from <= t <= t_to]
    return max((b - a for a, b in zip(ts, ts[1:])), default=0.0)


def case_grammar(row, rng):
    srv = Server("grammar", PORT0 + 1).start()
    bombs = [
        ("lark-700", chat("Say a.", guided_grammar=lark_chain(700, "a"))),
        ("gbnf-700", chat("Say a.", grammar=gbnf_chain(700, "a"))),
        ("defs-300", chat("JSON please.", response_format={
            "type": "json_schema", "json_schema": {"name": "deep", "schema": deep_defs(300)}})),
        ("props-8000", chat("JSON please.", response_format={
            "type": "json_schema", "json_schema": {"name": "wide", "schema": wide_object(8000)}})),
    ]
    ten = [(f"lark-700-x{i}", chat("Say it.", guided_grammar=lark_chain(700, f"t{i}")))
           for i in range(10)]
    results = []
    deaths = []

    async def go():
        state = {}
        stream = asyncio.create_task(long_stream(srv.port, state))
        await asyncio.sleep(1.0)  # the stream is decoding
        t0 = time.monotonic()
        for name, body in bombs:
            r = await http(srv.port, "POST", "/v1/chat/completions", body, timeout=120)
            results.append((name, r))
            await asyncio.sleep(0.2)
            if not srv.alive():  # note which bomb killed it, go on with a new server
                deaths.append(name)
                await asyncio.to_thread(srv.start)
        rs = await asyncio.gather(*(http(srv.port, "POST", "/v1/chat/completions", b,
                                         timeout=120) for _, b in ten))
        results.extend(zip((n for n, _ in ten), rs))
        t1 = time.monotonic()
        await asyncio.sleep(0.5)
        state["stop"] = True
        r = await stream
        return r, t0, t1

    stream, t0, t1 = asyncio.run(go())
    row.requests = len(results) + 1
    row.faults = len(results)
    statuses = {}
    ten_names = {n for n, _ in ten}
    for name, r in results:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        # Ten at once overflow the bounded compile queue (slots + 8 waiting): the ones
        # past it are refused with 503 at once, by design.
        allowed = (200, 400, 503) if name in ten_names else (200, 400)
        if r["status"] not in allowed:
            row.fail(f"{name}: status {r['status']} error {r['error']}")
    row.note("bomb statuses " + ", ".join(f"{k}:{v}" for k, v in statuses.items()))
    row.note(f"bombs took {t1 - t0:.1f} s")
    for name in deaths:
        row.fail(f"{name} killed the server (restarted for the next bomb)")
    evs = stream["events"]
    if len(evs) < 10:
        row.fail(f"stream got {len(evs)} events")
    else:
        gap = worst_gap(evs, t0, t1)
        row.note(f"stream {len(evs)} events, worst gap during bombs {gap * 1000:.0f} ms")
        if gap >= 1.0:
            row.fail(f"stream stalled {gap:.2f} s while grammars compiled")
    if not srv.alive():
        row.fail("server died")
    else:
        st, _ = simple_request(srv.port, "POST", "/v1/chat/completions", chat("Hi"))
        if st != 200:
            row.fail(f"plain request after bombs got {st}")
    finish_server(row, srv)


# --------------------------------------------------------------------------- case 4: disk-kill


def disk_prompts(rng, n=12, words=220):
    vocab = ("river stone lamp garden winter copper violet harbor ladder signal pepper "
             "marble canyon orbit velvet thunder meadow basket lantern pilot").split()
    return [f"Document {i}: " + " ".join(rng.choice(vocab) for _ in range(words)) +
            "\nSummarize the document in one sentence:" for i in range(n)]


async def greedy_all(port, prompts, concurrency=1, max_tokens=12, timeout=120):
    sem = asyncio.Semaphore(concurrency)

    async def one(p):
        async with sem:
            r = await http(port, "POST", "/v1/completions",
                           {"prompt": p, "max_tokens": max_tokens, "temperature": 0},
                           timeout=timeout)
        if r["status"] != 200:
            return None
        return json.loads(r["body"])["choices"][0]["text"]

    return await asyncio.gather(*(one(p) for p in prompts))


def case_disk_kill(row, rng):
    d = os.path.join(WORK, "kvdisk")
    os.makedirs(d, exist_ok=True)
    args = ["--kv-cache-bytes", "16m", "--kv-disk-dir", d, "--kv-disk-bytes", "256m"]
    prompts = disk_prompts(rng)
    a = Server("disk-a", PORT0 + 2, args).start()

    async def load_until_spilling():
        """Sends rounds of prompts; SIGKILLs the server mid-round once blocks spill."""
        spills = 0
        for rnd in range(6):
            tasks = [asyncio.create_task(greedy_all(a.port, prompts[i::4], 1)) for i in range(4)]
            await asyncio.sleep(0.4 + 0.3 * rnd)
            spills = (await asyncio.to_thread(a.metrics)).get("folio_kv_tier_spills_total", 0)
            if spills > 0:
                await asyncio.sleep(rng.uniform(0.05, 0.3))
                a.signal(signal.SIGKILL)
                await asyncio.gather(*tasks, return_exceptions=True)
                return spills, rnd
            await asyncio.gather(*tasks)
        return spills, None

    spills, rnd = asyncio.run(load_until_spilling())
    row.requests += len(prompts) * ((rnd or 6) + 1)
    row.faults += 1
    a.proc.wait(10)
    finish_server(row, a)
    files = os.listdir(d)
    row.note(f"killed after {spills:.0f} spills, {len(files)} files "
             f"({sum(f.endswith('.tmp') for f in files)} .tmp)")
    if not spills:
        row.fail("no block spilled to disk before the kill")
    b = Server("disk-b", PORT0 + 2, args).start()
    got = asyncio.run(greedy_all(b.port, prompts, 2))
    m = b.metrics()
    row.note(f"restart: {m.get('folio_kv_tier_fetches_total', 0):.0f} tier fetches")
    row.requests += len(prompts)
    finish_server(row, b, expect_rc=0)
    c = Server("disk-fresh", PORT0 + 3, ["--kv-cache-bytes", "16m"]).start()
    want = asyncio.run(greedy_all(c.port, prompts, 2))
    row.requests += len(prompts)
    finish_server(row, c, expect_rc=0)
    for i, (g, w) in enumerate(zip(got, want)):
        if g is None or g != w:
            row.fail(f"prompt {i}: restarted {g!r} != fresh {w!r}")
    disk_model_swap(row, prompts)


def disk_model_swap(row, prompts):
    """Blocks spilled for one model file must not serve another file at the same path
    (same size, same mtime, different weights)."""
    src = model_path()
    with open(src, "rb") as f:
        _, data_start = gguf_fields(f.read(8 << 20))
    m = os.path.join(WORK, "swap-model.gguf")
    shutil.copyfile(src, m)
    d = os.path.join(WORK, "kvdisk-swap")
    os.makedirs(d, exist_ok=True)
    args = ["--model", m, "--kv-cache-bytes", "16m", "--kv-disk-dir", d, "--kv-disk-bytes", "256m"]
    a = Server("swap-a", PORT0 + 2, args).start()
    before = asyncio.run(greedy_all(a.port, prompts, 2))
    before += asyncio.run(greedy_all(a.port, prompts, 2))  # evicts the first round to disk
    spills = a.metrics().get("folio_kv_tier_spills_total", 0)
    finish_server(row, a, expect_rc=0)
    # Other weights, same size and mtime: swap two block-aligned 4 MB runs of the first
    # tensor data (token embeddings: the rows of many tokens trade places).
    st = os.stat(m)
    half = 20 * 200_000  # a multiple of Q4_1's 20-byte block
    with open(m, "r+b") as f:
        f.seek(data_start)
        x = f.read(2 * half)
        f.seek(data_start)
        f.write(x[half:] + x[:half])
    os.utime(m, ns=(st.st_atime_ns, st.st_mtime_ns))
    b = Server("swap-b", PORT0 + 2, args).start()
    got = asyncio.run(greedy_all(b.port, prompts, 2))
    fetches = b.metrics().get("folio_kv_tier_fetches_total", 0)
    finish_server(row, b, expect_rc=0)
    c = Server("swap-fresh", PORT0 + 3, ["--model", m, "--kv-cache-bytes", "16m"]).start()
    want = asyncio.run(greedy_all(c.port, prompts, 2))
    finish_server(row, c, expect_rc=0)
    row.requests += 5 * len(prompts)
    row.faults += 1
    changed = sum(x != y for x, y in zip(before, want))
    row.note(f"model swapped in place: {spills:.0f} spills before, {fetches:.0f} fetches after, "
             f"{changed}/{len(prompts)} outputs changed by the swap")
    if fetches:
        row.fail(f"after the model file changed, {fetches:.0f} blocks spilled for the old "
                 "contents were fetched (the tier is keyed by path, not contents)")
    row.note(f"e.g. before {before[0]!r}, after restart {got[0]!r}, fresh {want[0]!r}")
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g is None or g != w]
    if bad:
        row.fail(f"after the model file changed, {len(bad)} outputs differ from a fresh server "
                 f"(stale disk blocks served), e.g. {got[bad[0]]!r} != {want[bad[0]]!r}")


# --------------------------------------------------------------------------- case 5: sigterm


def case_sigterm(row, rng):
    srv = Server("sigterm", PORT0 + 4).start()
    specs = [(rng.randint(24, 80), False) for _ in range(6)] + [(6000, True) for _ in range(3)]
    results = []

    async def go():
        firsts = [asyncio.Event() for _ in specs]

        async def one(i, mt, long):
            def on_event(d):
                firsts[i].set()
            body = {"stream": True, "max_tokens": mt, "temperature": 0, "ignore_eos": True}
            if i % 2:
                r = await http(srv.port, "POST", "/v1/chat/completions",
                               dict(body, messages=[{"role": "user", "content": f"Count to {i}"}]),
                               timeout=60, on_event=on_event)
            else:
                r = await http(srv.port, "POST", "/v1/completions",
                               dict(body, prompt=f"Story number {i}:"), timeout=60,
                               on_event=on_event)
            firsts[i].set()
            return r

        tasks = [asyncio.create_task(one(i, mt, lg)) for i, (mt, lg) in enumerate(specs)]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in firsts)), 30)
        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        health = await http(srv.port, "GET", "/health", timeout=5)
        late = await http(srv.port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2},
                          timeout=5)
        rs = await asyncio.gather(*tasks)
        rc = await asyncio.to_thread(srv.proc.wait, 40)
        return rs, health, late, rc, time.monotonic() - t0

    rs, health, late, rc, took = asyncio.run(go())
    row.requests = len(specs) + 2
    row.faults = 1
    row.note(f"exit {rc} after {took:.1f} s; /health while draining {health['status']}, "
             f"new request {late['status']}")
    if health["status"] not in (503, None):
        row.fail(f"/health while draining answered {health['status']}")
    if late["status"] not in (503, None):
        row.fail(f"a new request while draining answered {late['status']}")
    if took > 20:
        row.fail(f"took {took:.1f} s to exit (bound 20 s)")
    if rc != 0:
        row.fail(f"exit code {rc}")
    reasons = {}
    for (mt, long), r in zip(specs, rs):
        _, finish, done = stream_texts(r["events"])
        fr = finish.get(0)
        reasons[fr] = reasons.get(fr, 0) + 1
        if r["status"] != 200 or not fr or not done:
            row.fail(f"stream (max_tokens {mt}) ended without finish/[DONE]: "
                     f"status {r['status']} error {r['error']} finish {fr} done {done}")
        elif not long and fr != "length":
            row.fail(f"short stream (max_tokens {mt}) cut: finish {fr}")
    row.note("finish reasons " + ", ".join(f"{k}:{v}" for k, v in reasons.items()))
    finish_server(row, srv)


# --------------------------------------------------------------------------- case 6: slow-read


def case_slow_read(row, rng):
    srv = Server("slow", PORT0 + 5).start()
    idle = srv.rss_mb()
    peak = [idle]
    n = 20

    async def go():
        stop = asyncio.Event()

        async def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], srv.rss_mb())
                await asyncio.sleep(0.25)

        sampler = asyncio.create_task(sample())
        tasks = [asyncio.create_task(http(
            srv.port, "POST", "/v1/chat/completions",
            {"messages": [{"role": "user", "content": f"Tell story {i} in detail."}],
             "max_tokens": 4000, "ignore_eos": True, "stream": True, "n": 2,
             "logprobs": True, "top_logprobs": 20},
            timeout=22, rcvbuf=4096, slow_read=(512, 0.5))) for i in range(n)]
        rs = await asyncio.gather(*tasks)  # each ends at its 22 s timeout and closes
        m = await asyncio.to_thread(srv.wait_idle, 30)
        await asyncio.sleep(1)
        after = srv.rss_mb()
        stop.set()
        await sampler
        return rs, m, after

    rs, m, after = asyncio.run(go())
    row.requests = n
    row.faults = n
    row.note(f"RSS idle {idle:.0f} MB, peak {peak[0]:.0f} MB (bound {RSS_BOUND_MB}), "
             f"after close {after:.0f} MB")
    started = sum(1 for r in rs if r["status"] == 200)
    if started != n:
        row.fail(f"{n - started} slow streams got no 200")
    if peak[0] > RSS_BOUND_MB:
        row.fail(f"peak RSS {peak[0]:.0f} MB above {RSS_BOUND_MB} MB")
    if m.get("folio_requests_running", 1) or m.get("folio_requests_waiting", 1):
        row.fail("requests still running 30 s after the readers closed")
    used = m.get("folio_kv_blocks_used", 0)
    if used:
        row.leaks += int(used)
        row.note(f"{used:.0f} KV blocks held after close")
    st, _ = simple_request(srv.port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 3})
    if st != 200:
        row.fail(f"request after slow readers got {st}")
    finish_server(row, srv)


# --------------------------------------------------------------------------- case 7: disconnect


class ZmqSub:
    """A minimal ZMTP 3.0 SUB peer (NULL mechanism) listening on loopback: folio's
    `--kv-events-endpoint tcp://127.0.0.1:PORT` connects to it. Counts the bytes of the
    events received; `drop()` resets the connection (folio must reconnect, never die)."""

    def __init__(self, port):
        self.port, self.bytes, self.conns, self.writers = port, 0, 0, []

    async def start(self):
        self.server = await asyncio.start_server(self.handle, HOST, self.port)

    async def handle(self, reader, writer):
        self.conns += 1
        self.writers.append(writer)
        greeting = (b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0")
                    + b"\0" + b"\0" * 31)
        props = b"\x0bSocket-Type" + struct.pack(">I", 3) + b"SUB"
        ready = b"\x05READY" + props
        try:
            writer.write(greeting + b"\x04" + bytes([len(ready)]) + ready + b"\x00\x01\x01")
            await writer.drain()
            await reader.readexactly(64)
            while True:
                flags = (await reader.readexactly(1))[0]
                size = (struct.unpack(">Q", await reader.readexactly(8))[0] if flags & 2
                        else (await reader.readexactly(1))[0])
                await reader.readexactly(size)
                if not flags & 4:
                    self.bytes += size
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            writer.close()

    def drop(self):
        for w in self.writers:
            sock = w.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            w.close()
        self.writers = []

    async def stop(self):
        self.drop()
        self.server.close()


def case_disconnect(row, rng):
    # KV-cache events go to a subscriber that resets its connection midway.
    srv = Server("disconnect", PORT0 + 6, ["--kv-events-endpoint", f"tcp://{HOST}:{PORT0 + 9}"])
    n = 200
    plans = []
    for i in range(n):
        kind = rng.choices(["before-send", "mid-headers", "mid-body", "after-send", "rst",
                            "after-k", "full"], [1, 1, 1, 2, 1, 6, 3])[0]
        chatapi = rng.random() < 0.5
        body = {"stream": True, "max_tokens": rng.randint(8, 64), "temperature": rng.choice([0, 0.8]),
                "n": rng.choice([1, 1, 2]), "seed": i}
        if chatapi:
            body["messages"] = [{"role": "user", "content": f"Item {i}: write about {rng.random()}"}]
        else:
            body["prompt"] = f"Item {i}: shared preamble about weather. " * rng.randint(1, 20)
        path = "/v1/chat/completions" if chatapi else "/v1/completions"
        plans.append((kind, path, body, rng.randint(0, 20)))

    async def one(kind, path, body, k):
        raw = build_request(srv.port, "POST", path, body)
        if kind in ("before-send", "mid-headers", "mid-body", "after-send", "rst"):
            try:
                reader, writer = await asyncio.open_connection(HOST, srv.port)
                cut = {"before-send": 0, "mid-headers": raw.index(b"\r\n\r\n") // 2,
                       "mid-body": raw.index(b"\r\n\r\n") + 4 + (len(raw) - raw.index(b"\r\n\r\n")) // 2,
                       "after-send": len(raw), "rst": len(raw)}[kind]
                writer.write(raw[:cut])
                await writer.drain()
                await asyncio.sleep(rng.uniform(0, 0.3))
                if kind == "rst":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.close()
            except OSError:
                pass
            return "ok"
        seen = [0]

        def on_event(d):
            seen[0] += 1
            return kind == "full" or seen[0] < k

        r = await http(srv.port, "POST", path, body, timeout=90, on_event=on_event)
        if kind == "full":
            texts, finish, done = stream_texts(r["events"])
            if r["status"] != 200 or not done or len(finish) != body["n"]:
                return f"full stream lost: status {r['status']} error {r['error']} done {done}"
        return "ok"

    async def go():
        sub = ZmqSub(PORT0 + 9)
        await sub.start()
        await asyncio.to_thread(srv.start)
        tasks = [asyncio.create_task(one(*p)) for p in plans]
        await asyncio.sleep(3)
        sub.drop()
        out = await asyncio.gather(*tasks)
        await asyncio.sleep(0.5)
        await sub.stop()
        return out, sub

    out, sub = asyncio.run(go())
    row.note(f"KV events: {sub.bytes} bytes over {sub.conns} subscriber connection(s), "
             "one reset midway")
    row.requests = n
    row.faults = sum(1 for p in plans if p[0] != "full")
    for o in out:
        if o != "ok":
            row.fail(o)
    m = srv.wait_idle(40)
    time.sleep(0.5)
    m = srv.metrics()
    used = m.get("folio_kv_blocks_used", -1)
    row.note(f"idle: running {m.get('folio_requests_running')}, waiting "
             f"{m.get('folio_requests_waiting')}, kv_blocks_used {used}")
    if m.get("folio_requests_running", 1) or m.get("folio_requests_waiting", 1):
        row.fail("requests still running 40 s after the clients left")
    if used != 0:
        row.leaks += max(1, int(used))
    st, _ = simple_request(srv.port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 3})
    if st != 200:
        row.fail(f"request after disconnects got {st}")
    finish_server(row, srv)


# --------------------------------------------------------------------------- case 8: crosstalk


def case_crosstalk(row, rng):
    adapters = {}
    for name, seed in (("a", 11), ("b", 12)):
        path = os.path.join(WORK, f"lora-{name}.gguf")
        subprocess.run([BIN, "lora", "random", "--seed", str(seed), "--out", path], check=True,
                       capture_output=True, timeout=120)
        adapters[name] = path
    srv = Server("crosstalk", PORT0 + 7, ["--lora", f"a={adapters['a']}",
                                          "--lora", f"b={adapters['b']}"]).start()
    base = json.loads(simple_request(srv.port, "GET", "/v1/models")[1])["data"][0]["id"]
    system = ("You are a careful assistant. When the user gives you a marker code, you reply "
              "with exactly that marker code and nothing else, without quotes or commentary. ")
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    reqs = []
    for i in range(50):
        marker = "MK-" + "".join(rng.choice(letters) for _ in range(6))
        body = {"model": [base, "a", "b"][i % 3], "temperature": 0, "max_tokens": 16,
                "n": 2 if i % 4 == 0 else 1, "stream": i % 5 == 0,
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": f"Repeat this marker: {marker}"}]}
        reqs.append(body)

    async def run(body):
        r = await http(srv.port, "POST", "/v1/chat/completions", body, timeout=120)
        if r["status"] != 200:
            return None
        if body["stream"]:
            texts, _, done = stream_texts(r["events"])
            return [texts.get(j) for j in range(body["n"])] if done else None
        return [text_of(c) for c in sorted(json.loads(r["body"])["choices"],
                                           key=lambda c: c["index"])]

    async def go():
        solo = [await run(b) for b in reqs]
        together = await asyncio.gather(*(run(b) for b in reqs))
        again = await asyncio.gather(*(run(b) for b in reqs))  # prefix cache warm
        return solo, together, again

    solo, together, again = asyncio.run(go())
    row.requests = 150
    row.faults = 100
    wrong = 0
    for i, (s, t, g) in enumerate(zip(solo, together, again)):
        for label, x in (("concurrent", t), ("cached", g)):
            if s is None or x != s:
                wrong += 1
                if wrong <= 5:
                    row.fail(f"request {i} ({reqs[i]['model']}, n={reqs[i]['n']}) {label}: "
                             f"{x!r} != solo {s!r}")
    if wrong > 5:
        row.fail(f"... {wrong} mismatches in all")
    distinct = len({(tuple(s) if s else None) for s in solo})
    row.note(f"{distinct} distinct solo outputs; adapters differ from base: "
             f"{len({tuple(solo[i] or []) for i in (0, 1, 2)}) > 1}")
    m = srv.wait_idle(30)
    if m.get("folio_kv_blocks_used", 0):
        row.leaks += int(m["folio_kv_blocks_used"])
    finish_server(row, srv)


# --------------------------------------------------------------------------- main

CASES = [
    ("fuzz", case_fuzz), ("gguf", case_gguf), ("grammar", case_grammar),
    ("disk-kill", case_disk_kill), ("sigterm", case_sigterm), ("slow-read", case_slow_read),
    ("disconnect", case_disconnect), ("crosstalk", case_crosstalk),
]


def main():
    global BIN, WORK
    args = sys.argv[1:]
    only, keep = None, None
    while args:
        a = args.pop(0)
        if a == "--only":
            only = set(args.pop(0).split(","))
        elif a == "--keep":
            keep = args.pop(0)
        else:
            BIN = a
    BIN = os.path.abspath(BIN)
    if not os.access(BIN, os.X_OK):
        sys.exit(f"fault_suite: no folio binary at {BIN} (cargo build --release -p folio)")
    WORK = keep or tempfile.mkdtemp(prefix="folio-faults-")
    os.makedirs(WORK, exist_ok=True)
    t_all = time.monotonic()
    rows = []
    for i, (name, fn) in enumerate(CASES):
        if only and name not in only:
            continue
        row = Row(name)
        log(f"case {name} ...")
        t0 = time.monotonic()
        try:
            fn(row, random.Random(1000 + i))
        except Exception as e:  # a case that cannot finish fails, the others still run
            row.error = f"{type(e).__name__}: {e}"
            row.note("ERROR " + row.error[:300])
        for srv in STARTED:
            if srv.alive():
                srv.signal(signal.SIGKILL)
                srv.proc.wait(10)
        STARTED.clear()
        row.secs = time.monotonic() - t0
        rows.append(row)
        log(f"case {name}: {'pass' if row.passed else 'FAIL'} in {row.secs:.1f} s")
        for n in row.notes:
            log(f"    {n}")
    print()
    hdr = f"{'case':<11} {'requests':>8} {'faults':>7} {'panics':>6} {'leaks':>6} {'wrong':>6} {'secs':>6}  result"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r.name:<11} {r.requests:>8} {r.faults:>7} {r.panics:>6} {r.leaks:>6} "
              f"{r.wrong + (1 if r.error else 0):>6} {r.secs:>6.1f}  {'pass' if r.passed else 'FAIL'}")
    passed = sum(r.passed for r in rows)
    print(f"\nlogs in {WORK}; total {time.monotonic() - t_all:.0f} s")
    print(f"{passed} passed, {len(rows) - passed} failed")
    if not keep and passed == len(rows):
        shutil.rmtree(WORK, ignore_errors=True)
    sys.exit(0 if passed == len(rows) else 1)


if __name__ == "__main__":
    main()
