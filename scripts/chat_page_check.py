#!/usr/bin/env python3
"""Checks folio's chat page (`GET /`) in a real headless Chromium, driven over the DevTools
protocol (Debian's `chromium` package; pip install websockets).

Opens the page, (with --api-key: sees the page ask for the key after the 401, enters a
wrong key and sees it refused, then the right one), types a question, sees the answer
stream (its text grows over at least two observations while the button says Stop),
presses Stop (the stream ends: the button says Send again, the answer is marked
stopped and grows no more, and the server counts the request aborted), sends a second
question that ends by max_tokens (usage shown), checks the markdown rendering and the folded reasoning on fixed inputs, and that the
browser logged no script error or Content-Security-Policy violation.

Usage: chat_page_check.py BASE_URL [--api-key KEY] [--screenshot PATH]
       (BASE_URL: the server's root, e.g. http://127.0.0.1:8080)
"""
import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from websockets.sync.client import connect

QUESTIONS = [
    "Write a long story about a dragon who learns to bake bread.",
    "Explain in detail how a steam engine works, step by step.",
    "List one hundred animals, one a line, with a fact about each.",
]


class Browser:
    """One headless Chromium and one page of it, attached over a flat DevTools session."""

    def __init__(self, binary: str):
        self.profile = tempfile.mkdtemp(prefix="folio-chromium-")
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = None
        deadline = time.time() + 60
        while time.time() < deadline and url is None:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            url = m and m.group(1)
        if url is None:
            raise SystemExit("chromium did not start (no 'DevTools listening' line)")
        self.ws = connect(url, max_size=None, open_timeout=30)
        self.next_id = 0
        self.events = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.page(f"{domain}.enable")
        self.page("Emulation.setDeviceMetricsOverride", width=1000, height=720,
                  deviceScaleFactor=1, mobile=False)

    def call(self, method, session=None, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        while True:
            m = json.loads(self.ws.recv(timeout=60))
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def page(self, method, **params):
        return self.call(method, session=self.session, **params)

    def js(self, expr):
        r = self.page("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expr, what, timeout=30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = self.js(expr)
            if v:
                return v
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what} ({expr})")

    def click(self, selector):
        """A real mouse click at the element's centre."""
        box = self.js(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                      ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.page("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1],
                      button="left", clickCount=1)

    def type_into(self, selector, text):
        """Empties the field, then types `text` into it as keyboard input."""
        self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                "e.focus(); e.value = ''; })()")
        self.page("Input.insertText", text=text)

    def press_enter(self):
        key = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}
        self.page("Input.dispatchKeyEvent", type="keyDown", text="\r", **key)
        self.page("Input.dispatchKeyEvent", type="keyUp", **key)

    def screenshot(self, path):
        data = self.page("Page.captureScreenshot", format="png")["data"]
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def problems(self):
        """Script errors and CSP violations the page logged (a 401 resource error is
        expected with a key and is not one)."""
        self.js("0")  # drain pending events
        out = []
        for e in self.events:
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(e["params"]["exceptionDetails"].get("text"))
            elif e.get("method") == "Log.entryAdded":
                entry = e["params"]["entry"]
                if entry["level"] == "error" and entry.get("source") != "network":
                    out.append(f"{entry.get('source')}: {entry.get('text')}")
            elif e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error":
                out.append(str(e["params"]["args"]))
        return out

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)


LAST = "[...document.querySelectorAll('.msg.assistant')].at(-1)"


def answer_len(b):
    return b.js(f"(() => {{ const a = {LAST}; return a ? a.querySelector('.content').textContent.length : -1; }})()")


def button(b):
    return b.js("document.getElementById('send').textContent")


def enter_key(b, key):
    """The 401 path: the page asks for a key; a wrong one is refused, the right one used."""
    b.wait("!document.getElementById('notice').hidden", "the page to ask for the key")
    notice = b.js("document.getElementById('notice').textContent")
    assert "needs an API key" in notice, notice
    assert b.js("document.getElementById('model').options.length") == 0
    assert b.js("!document.getElementById('settings').hidden"), "settings open at the key field"
    b.type_into("#api-key", key + "-wrong")
    b.click("#use-key")
    b.wait("document.getElementById('notice').textContent.includes('refused this API key')",
           "the wrong key to be refused")
    b.type_into("#api-key", key)
    b.click("#use-key")
    b.wait("document.getElementById('notice').hidden", "the notice to go once the key is right")
    print("key: asked for after the 401, a wrong one refused, the right one used")


def aborted(base, key):
    """The server's count of requests that ended because the client went away."""
    req = urllib.request.Request(base + "metrics")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    text = urllib.request.urlopen(req, timeout=30).read().decode()
    m = re.search(r'^folio_requests_finished_total\{reason="abort"\} (\S+)$', text, re.M)
    return float(m.group(1))


def stream_and_stop(b, base, key):
    """Sends questions until one is still streaming after two growths of its text, then
    presses Stop: the page ends the stream and the server aborts the request. Returns the
    observed lengths."""
    for question in QUESTIONS:
        b.type_into("#prompt", question)
        b.click("#send")
        b.wait(f"{LAST} && document.getElementById('send').textContent === 'Stop'", "the stream to start")
        seen = []
        deadline = time.time() + 120
        while time.time() < deadline and button(b) == "Stop":
            n = answer_len(b)
            if n > 0 and (not seen or n > seen[-1]):
                seen.append(n)
            if len(seen) >= 3:
                break
            time.sleep(0.02)
        if len(seen) < 3 or button(b) != "Stop":
            print(f"  answer ended before it could be stopped (lengths {seen}); next question")
            b.wait("document.getElementById('send').textContent === 'Send'", "the answer to end")
            continue
        before = aborted(base, key)
        b.click("#send")
        b.wait("document.getElementById('send').textContent === 'Send'", "Stop to end the stream", 10)
        finish = b.js(f"{LAST}.dataset.finish")
        meta = b.js(f"{LAST}.querySelector('.meta').textContent")
        assert finish == "stopped", (finish, meta)
        assert meta.startswith("stopped"), meta
        stopped_at = answer_len(b)
        time.sleep(1.0)
        assert answer_len(b) == stopped_at, "the answer grew after Stop"
        assert stopped_at >= seen[-1]
        deadline = time.time() + 10
        while aborted(base, key) != before + 1:
            assert time.time() < deadline, "the server did not abort the stopped request"
            time.sleep(0.1)
        print(f"stream: text grew {seen} while the button said Stop; stopped at {stopped_at} chars; "
              "the server counted one more aborted request")
        return seen
    raise AssertionError("no answer was still streaming after two growths: cannot check Stop")


def short_answer(b):
    """A second turn that ends by max_tokens: the conversation goes on after a Stop."""
    b.type_into("#max_tokens", "8")
    b.type_into("#temperature", "0")
    b.type_into("#prompt", "Write a poem about the sea.")
    b.press_enter()
    finish = b.wait(f"{LAST}.dataset.finish", "the second answer to end", 60)
    meta = b.js(f"{LAST}.querySelector('.meta').textContent")
    assert finish == "length", (finish, meta, b.js(f"{LAST}.textContent"))
    assert meta.startswith("cut at max_tokens · 8 tokens"), meta
    assert b.js("document.querySelectorAll('.msg.user').length") == 2
    print(f"second turn: ended by length, meta {meta!r}")


def rendering(b):
    """The markdown subset on fixed text (HTML in it stays text), and reasoning folded."""
    html = b.js("""(() => {
        const d = document.createElement('div');
        markdown(d, 'Hi **b** `c` <i>x</i>\\nnext\\n\\n```rust\\nfn <x>() {}\\n\\n}\\n```\\n- a\\n- b\\n1. n\\n# T\\n```\\nopen');
        return d.innerHTML; })()""")
    want = ("<p>Hi <strong>b</strong> <code>c</code> &lt;i&gt;x&lt;/i&gt;<br>next</p>"
            '<pre><code class="language-rust">fn &lt;x&gt;() {}\n\n}</code></pre>'
            "<ul><li>a</li><li>b</li></ul><ol><li>n</li></ol><h3>T</h3><pre><code>open</code></pre>")
    assert html == want, f"\n got {html!r}\nwant {want!r}"
    folded = b.js("""(() => {
        const a = new Answer(); a.addReasoning('Let me '); a.addReasoning('think.');
        a.addContent('Done.');
        const d = a.el.querySelector('details.reasoning');
        const r = [d.open, d.querySelector('summary').textContent, d.textContent,
                   a.el.firstElementChild === d, a.body.textContent];
        a.el.remove(); return r; })()""")
    assert folded == [False, "Reasoning", "ReasoningLet me think.", True, "Done."], folded
    print("rendering: markdown subset exact, reasoning folded in <details>")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("base_url")
    ap.add_argument("--api-key")
    ap.add_argument("--screenshot")
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")
    args = ap.parse_args()
    base = args.base_url.rstrip("/") + "/"
    b = Browser(args.chromium)
    try:
        b.page("Page.navigate", url=base)
        b.wait("document.readyState === 'complete' && typeof markdown === 'function'", "the page to load")
        if args.api_key:
            enter_key(b, args.api_key)
        models = b.wait("[...document.getElementById('model').options].map(o => o.value).join(',')",
                        "the model list")
        assert b.js("document.getElementById('notice').hidden"), b.js("document.getElementById('notice').textContent")
        print(f"models in the picker: {models}")
        if b.js("document.getElementById('settings').hidden"):
            b.click("#settings-toggle")
        b.type_into("#max_tokens", "400")
        stream_and_stop(b, base, args.api_key)
        short_answer(b)
        saved = json.loads(b.js("localStorage.getItem('folio.settings')"))
        assert (saved["max_tokens"], saved["temperature"]) == ("8", "0"), saved
        if args.api_key:
            assert b.js("localStorage.getItem('folio.apiKey')") == args.api_key
        rendering(b)
        if args.screenshot:
            b.screenshot(args.screenshot)
            print(f"screenshot: {args.screenshot}")
        problems = b.problems()
        assert not problems, problems
        print("chat page: OK" + (" (with --api-key)" if args.api_key else ""))
        return 0
    finally:
        b.close()


if __name__ == "__main__":
    sys.exit(main())
