"""A tiny headless-Chromium driver for the report tests (DevTools protocol over a pipe).

``--remote-debugging-pipe`` makes Chromium read NUL-terminated JSON commands on fd 3 and write
replies and events on fd 4, so no websocket client is needed. Install Chromium with
``apt-get install -y --no-install-recommends chromium`` (Debian); tests skip without it.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.conftest import HANG_S

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--mute-audio",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, exe: str, timeout_s: float = HANG_S) -> None:
        # a hang guard, never a measure: a page under a loaded machine's Chromium may take minutes
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="advisor-chromium-")
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()

        def fds() -> None:  # runs in the child: the pipe ends become fd 3 and fd 4
            a, b = os.dup(to_child_r), os.dup(from_child_w)  # above 4, so dup2 never no-ops
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                exe,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,
            close_fds=False,  # Python's own fds are not inheritable anyway
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    # ---- protocol -------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict[str, Any]:
        import select

        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from Chromium")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed the DevTools pipe")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)  # type: ignore[no-any-return]

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})  # type: ignore[no-any-return]
            self.events.append(reply)

    def wait_event(self, method: str, session: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        for ev in self.events:
            if ev.get("method") == method and ev.get("sessionId") == session:
                return ev
        while True:
            ev = self._read_message(deadline)
            self.events.append(ev)
            if ev.get("method") == method and ev.get("sessionId") == session:
                return ev

    # ---- pages ----------------------------------------------------------------------
    def open(
        self,
        url: str,
        javascript: bool = True,
        dark: bool = False,
        width: int = 1200,
        height: int = 900,
    ) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=sid)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=sid,
        )
        self.send(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]},
            session=sid,
        )
        if not javascript:
            self.send("Emulation.setScriptExecutionDisabled", {"value": True}, session=sid)
        self.send("Page.navigate", {"url": url}, session=sid)
        self.wait_event("Page.loadEventFired", sid)
        return Page(self, sid)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except Exception:  # noqa: BLE001 (already gone)
            pass
        try:
            self.proc.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.b = browser
        self.sid = session

    def eval(self, expression: str) -> Any:
        res = self.b.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=self.sid
        )
        if "exceptionDetails" in res:
            raise RuntimeError(f"evaluate failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def problems(self) -> list[str]:
        """Console messages, uncaught exceptions and error/warning log entries (CSP, loads)."""
        out = []
        for ev in self.b.events:
            if ev.get("sessionId") != self.sid:
                continue
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.consoleAPICalled":
                out.append(
                    f"console.{p.get('type')}: {[a.get('value') for a in p.get('args', [])]}"
                )
            elif m == "Runtime.exceptionThrown":
                out.append(f"exception: {p.get('exceptionDetails', {}).get('text')}")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry'].get('text')}")
        return out

    def requests(self) -> list[str]:
        return [
            ev["params"]["request"]["url"]
            for ev in self.b.events
            if ev.get("sessionId") == self.sid and ev.get("method") == "Network.requestWillBeSent"
        ]

    def screenshot(self, path: Path, full: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full:
            size = self.b.send("Page.getLayoutMetrics", session=self.sid)["cssContentSize"]
            params |= {
                "captureBeyondViewport": True,
                "clip": {
                    "x": 0,
                    "y": 0,
                    "width": size["width"],
                    "height": min(size["height"], 16000),
                    "scale": 1,
                },
            }
        data = self.b.send("Page.captureScreenshot", params, session=self.sid)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
