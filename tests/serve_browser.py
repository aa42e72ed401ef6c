"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: commands on the
browser's fd 3, answers on its fd 4, each a JSON object ended by a NUL byte), so the browser test needs no
driver package: Debian's ``chromium`` alone."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from typing import Any, Optional


def chromium_path() -> Optional[str]:
    return next(filter(None, (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome"))), None)


class Browser:
    def __init__(self, profile: str):
        to_browser, self._commands = os.pipe()
        self._answers, from_browser = os.pipe()

        def give_fds():  # the browser reads commands on fd 3 and writes answers on fd 4
            a, b = os.dup(to_browser), os.dup(from_browser)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [chromium_path(), "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", f"--user-data-dir={profile}", "--window-size=1000,700", "about:blank"],
            preexec_fn=give_fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._next_id, self._buffer, self.session = 0, b"", None

    def send(self, method: str, **params: Any) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._answers, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str) -> None:
        target = self.send("Target.createTarget", url=url)["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def evaluate(self, expression: str) -> Any:
        answer = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        deadline, problem = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:  # the page is still loading: the element is not there yet
                value, problem = None, exc
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"the page never made {expression!r} true (last error: {problem})")

    def click(self, element_id: str) -> None:
        box = self.evaluate(f"(() => {{ const r = document.getElementById({element_id!r}).getBoundingClientRect();"
                            " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def type(self, element_id: str, text: str) -> None:
        self.evaluate(f"document.getElementById({element_id!r}).focus()")
        self.send("Input.insertText", text=text)

    def choose(self, element_id: str, value: str) -> None:
        """Pick ``value`` in a select element, with the change event a person's choice fires."""
        self.evaluate(f"(() => {{ const e = document.getElementById({element_id!r}); e.value = {value!r};"
                      " e.dispatchEvent(new Event('change')); })()")
        if self.evaluate(f"document.getElementById({element_id!r}).value") != value:
            raise AssertionError(f"#{element_id} offers no {value!r}")

    def set_files(self, element_id: str, paths: list[str]) -> None:
        """Put files on a file input as a person's file chooser does (DevTools' DOM.setFileInputFiles)."""
        root = self.send("DOM.getDocument")["root"]["nodeId"]
        node = self.send("DOM.querySelector", nodeId=root, selector=f"#{element_id}")["nodeId"]
        self.send("DOM.setFileInputFiles", files=paths, nodeId=node)

    def screenshot(self) -> bytes:
        return base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])

    def close(self) -> None:
        try:
            self.session = None
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._commands)
        os.close(self._answers)
