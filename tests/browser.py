"""A real headless browser (Debian's ``chromium``) driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: JSON messages separated by NUL on fds 3 and 4), standard library
only. Used by tests/test_status_page_browser.py: load a page, see every console message, exception
and request, read the DOM, take a screenshot."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # the tests run as root; the page is the project's own
    "--disable-gpu",
    "--no-first-run",
    "--disable-extensions",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


@dataclass
class Browser:
    """One page in one browser; ``events`` holds every event the page sent, in order."""

    process: subprocess.Popen[bytes]
    commands: int
    answers: int
    session: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    _next_id: int = 0
    _buffer: bytes = b""

    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        """One command; its result (events that arrive meanwhile go to ``events``)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if self.session and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            for answer in self._read(deadline - time.monotonic()):
                if answer.get("id") == self._next_id:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error']}")
                    return answer["result"]
                self.events.append(answer)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method}: no answer in {timeout} s")

    def _read(self, timeout: float) -> list[dict[str, Any]]:
        ready, _, _ = select.select([self.answers], [], [], max(0.0, timeout))
        if ready:
            chunk = os.read(self.answers, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium exited ({self.process.poll()})")
            self._buffer += chunk
        *complete, self._buffer = self._buffer.split(b"\0")
        return [json.loads(m) for m in complete]

    def evaluate(self, expression: str) -> Any:
        """``expression``'s value in the page (JSON-able values only)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def problems(self) -> list[str]:
        """Every console error or warning, uncaught exception and browser log error (a failed load,
        a Content-Security-Policy refusal) the page produced, as text. Left out: a load Chromium
        aborted with ``net::ERR_NETWORK_CHANGED``, its answer to any interface appearing on the host
        (crbug 41465264): the end-to-end tests beside this one make network namespaces, veths and
        containers all the time (CI, 2026-12-06: three of the page's queries aborted so). What the
        page shows afterwards is asserted by each test, so a query that never came back still fails it."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails']}")
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "warning", "assert"):
                found.append(f"console.{params['type']}: {[a.get('value') for a in params['args']]}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                entry = params["entry"]
                if "net::ERR_NETWORK_CHANGED" in entry["text"]:
                    continue
                found.append(
                    f"log {entry['level']} ({entry['source']}): {entry['text']} {entry.get('url', '')}"
                )
        return found

    def requested(self) -> list[str]:
        """Every URL the page asked for."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def screenshot(self, width: int) -> bytes:
        """The whole page as PNG, ``width`` CSS pixels wide."""
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"])


def _high(fd: int) -> int:
    """A copy of ``fd`` numbered 10 or above, so that moving the pipes to 3 and 4 cannot clash."""
    return fcntl.fcntl(fd, fcntl.F_DUPFD, 10)


@contextlib.contextmanager
def browser(width: int = 1400, height: int = 1000) -> Iterator[Browser]:
    """Chromium on a fresh profile with one blank page attached, the page's console, log and
    network events recorded; stopped (and only it) afterwards."""
    profile = tempfile.mkdtemp(prefix="glm-chromium-")
    to_browser, commands = os.pipe()
    answers, from_browser = os.pipe()
    child_in, child_out = _high(to_browser), _high(from_browser)

    def pipes_on_3_and_4() -> None:
        os.dup2(child_in, 3)
        os.dup2(child_out, 4)

    process = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        # The DevTools pipe is fds 3 and 4 of the browser; every other fd of ours is close-on-exec.
        preexec_fn=pipes_on_3_and_4, close_fds=False,
    )  # fmt: skip
    for fd in (to_browser, from_browser, child_in, child_out):
        os.close(fd)
    page = Browser(process, commands, answers)
    try:
        target = page.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        page.session = page.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            page.send(f"{domain}.enable")
        page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        yield page
    finally:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            page.send("Browser.close", timeout=5)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        os.close(commands)
        os.close(answers)
        shutil.rmtree(profile, ignore_errors=True)
