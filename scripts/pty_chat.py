#!/usr/bin/env python3
"""Drives an interactive `folio run` through a pseudo-terminal, as a person would.

usage: pty_chat.py STEPS_JSON COMMAND [ARGS...]

STEPS_JSON is a list of steps, each one of
  {"send": "text"}                   type a line, wait for the next `>>> ` prompt
  {"send": "text", "stop": true}     type a line, press Ctrl-C once the answer has begun
  {"ctrl_c": true}                   press Ctrl-C at the prompt, wait for the prompt
  {"eof": true}                      press Ctrl-D (must be last)
Lines that are not the last step are followed by waiting for `>>> `; after the steps the
process must exit. Prints one JSON object: {"outputs": [what the terminal showed after
each step, its echo line removed, up to the next prompt], "exit": exit status, "start":
what was shown before the first prompt}. Standard library only.
"""

import json
import os
import pty
import select
import sys
import time

PROMPT = b">>> "
TIMEOUT_S = 180.0


def read_until(fd, buf, want, deadline):
    """Reads from fd into buf until buf ends with `want` (or, want=None, EOF)."""
    while True:
        if want is not None and buf.endswith(want):
            return buf
        left = deadline - time.monotonic()
        if left <= 0:
            raise SystemExit(f"timed out waiting for {want!r}; got {bytes(buf)[-400:]!r}")
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            chunk = b""
        if not chunk:
            if want is None:
                return buf
            raise SystemExit(f"process ended waiting for {want!r}; got {bytes(buf)[-400:]!r}")
        buf += chunk


def text(b):
    return bytes(b).decode("utf-8", "replace").replace("\r\n", "\n")


def main():
    steps = json.loads(sys.argv[1])
    argv = sys.argv[2:]
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    deadline = time.monotonic() + TIMEOUT_S
    buf = read_until(fd, bytearray(), PROMPT, deadline)
    start = text(buf[: -len(PROMPT)])
    outputs = []
    for i, step in enumerate(steps):
        last = i + 1 == len(steps)
        buf = bytearray()
        if step.get("eof"):
            os.write(fd, b"\x04")
        elif step.get("ctrl_c"):
            os.write(fd, b"\x03")
        else:
            line = step["send"].encode() + b"\n"
            os.write(fd, line)
            if step.get("stop"):
                # The echo, then at least one byte of the answer.
                echo = step["send"].encode() + b"\r\n"
                while not (buf.startswith(echo) and len(buf) > len(echo)):
                    r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
                    if not r:
                        raise SystemExit(f"no answer began; got {bytes(buf)!r}")
                    buf += os.read(fd, 4096)
                os.write(fd, b"\x03")
        if last:
            buf = read_until(fd, buf, None, deadline)
        else:
            buf = read_until(fd, buf, PROMPT, deadline)
            buf = buf[: -len(PROMPT)]
        out = text(buf)
        if "send" in step:
            echo = step["send"] + "\n"
            if not out.startswith(echo):
                raise SystemExit(f"no echo of {echo!r} in {out!r}")
            out = out[len(echo):]
        outputs.append(out)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    print(json.dumps({"start": start, "outputs": outputs, "exit": code}))


if __name__ == "__main__":
    main()
