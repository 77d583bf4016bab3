"""The browser side of tests/integration/browser.py: run as a subprocess, never imported by
the tests (it needs Selenium, which the library itself does not import).

    python browser_runner.py REQUEST.json      (result: one JSON object on stdout)

browser.py starts it under ``nsenter --net=/proc/PID/ns/net`` when a network namespace is
asked for, so Chromium, chromedriver (listening on that namespace's loopback) and this
Selenium client all live there. HOME is set to a fresh directory holding the NSS database
that browser.py prepared (the CA trusted with certutil), before Chromium starts.

The request: {"action": "jupyter" | "fetch", "url", "home", "artifacts_dir", "timeout",
"window": [w, h], "resolve": {host: ip}, ...action's own keys (see browser.py)}.
The result: {"ok": true, ...} or {"ok": false, "step", "error", "artifacts", "page_text"}.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CERT_ERROR = re.compile(r"\b(?:NET::|net::)?(ERR_(?:CERT|SSL)_[A-Z_]+)\b")
NET_ERROR = re.compile(r"\b(?:net::)?(ERR_[A-Z_]+)\b")
TERMINAL_SETTINGS = "lab/api/settings/@jupyterlab/terminal-extension:plugin"

# The visible main-area widget of a kind: JupyterLab hides the other tabs' widgets with
# lm-mod-hidden, and a closed launcher leaves nothing behind.
VISIBLE = ":not(.lm-mod-hidden)"
NOTEBOOK = f".jp-NotebookPanel{VISIBLE}"
TERMINAL = f".jp-Terminal{VISIBLE}"
LAUNCHER = f".jp-Launcher{VISIBLE}"


class StepFailed(Exception):
    """A step of the check failed; the message says what was expected and what was seen."""


class Runner:
    def __init__(self, req: dict[str, Any]):
        self.req = req
        self.artifacts = Path(req["artifacts_dir"]) if req.get("artifacts_dir") else None
        self.deadline = time.monotonic() + float(req.get("timeout", 120))
        self.step = "start"
        self.timings: dict[str, float] = {}
        self.saved: list[str] = []
        self.driver: webdriver.Chrome | None = None
        self._t0 = time.monotonic()

    # -- plumbing -------------------------------------------------------------------------

    def mark(self, step: str) -> None:
        now = time.monotonic()
        self.timings[self.step] = round(now - self._t0, 2)
        self.step, self._t0 = step, now

    def left(self) -> float:
        return max(0.5, self.deadline - time.monotonic())

    def wait(self, what: str, probe: Callable[[], Any], timeout: float | None = None) -> Any:
        """probe() until it returns something truthy (its value); StepFailed after timeout."""
        end = time.monotonic() + min(timeout or self.left(), self.left())
        last: Exception | None = None
        while True:
            try:
                value = probe()
                if value:
                    return value
            except (NoSuchElementException, StaleElementReferenceException) as exc:
                last = exc
            if time.monotonic() >= end:
                raise StepFailed(
                    f"timed out waiting for {what}" + (f" ({last.msg})" if last else "")
                )
            time.sleep(0.25)

    def visible(self, css: str, within=None, settle: bool = False):
        """The displayed elements matching css (after accepting any dialog, with settle)."""
        if settle:
            self.dismiss_dialogs()
        root = within or self.driver
        found = []
        for el in root.find_elements(By.CSS_SELECTOR, css):
            try:
                if el.is_displayed():
                    found.append(el)
            except StaleElementReferenceException:
                continue
        return found

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def screenshot(self, name: str) -> None:
        if self.artifacts is None or self.driver is None:
            return
        path = self.artifacts / name
        with contextlib.suppress(WebDriverException):
            self.driver.save_screenshot(str(path))
            self.saved.append(str(path))

    def save_text(self, name: str, text: str) -> None:
        if self.artifacts is None:
            return
        path = self.artifacts / name
        path.write_text(text)
        self.saved.append(str(path))

    def page_text(self) -> str:
        try:
            return self.js("return document.body ? document.body.innerText : ''") or ""
        except WebDriverException:
            return ""

    def start(self) -> None:
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        width, height = self.req.get("window") or (1400, 900)
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            f"--window-size={width},{height}",
            f"--user-data-dir={self.req['home']}/chromium-profile",
            "--no-proxy-server",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--password-store=basic",
        ):
            opts.add_argument(arg)
        resolve = self.req.get("resolve") or {}
        if resolve:
            rules = ", ".join(f"MAP {host} {ip}" for host, ip in resolve.items())
            opts.add_argument(f"--host-resolver-rules={rules}")
        # Certificates are verified: never accept an insecure one (Selenium's default, said
        # out loud so no one flips it). Chromium reads the CA from $HOME/.pki/nssdb.
        opts.accept_insecure_certs = False
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        log = os.devnull
        if self.artifacts:
            log = str(self.artifacts / "chromedriver.log")
            self.saved.append(log)
        service = Service(CHROMEDRIVER, log_output=log, env=dict(os.environ))
        self.driver = webdriver.Chrome(service=service, options=opts)
        self.driver.set_page_load_timeout(max(10.0, self.left()))

    def load(self, url: str) -> dict[str, Any]:
        """Open url; what the browser ended up showing, and whether TLS was trusted."""
        try:
            self.driver.get(url)
        except TimeoutException as exc:
            raise StepFailed(f"page load of {url} timed out") from exc
        except WebDriverException as exc:  # net::ERR_... for some failures
            match = NET_ERROR.search(exc.msg or "")
            return {"final_url": url, "error": match.group(1) if match else exc.msg}
        info = self.js(
            """
            const nav = performance.getEntriesByType('navigation')[0];
            return {
              final_url: document.URL,
              title: document.title,
              text: document.body ? document.body.innerText : '',
              http_status: nav && nav.responseStatus ? nav.responseStatus : null,
              secure_context: window.isSecureContext,
              protocol: location.protocol,
            };
            """
        )
        # An interstitial (certificate) or network error page: chrome-error:// URL or the
        # error code in its text; document.URL stays the requested URL in some versions.
        error_page = info["final_url"].startswith("chrome-error://") or not info["http_status"]
        code = None
        if error_page:
            source = self.driver.page_source
            match = CERT_ERROR.search(info["text"]) or CERT_ERROR.search(source)
            match = match or NET_ERROR.search(info["text"]) or NET_ERROR.search(source)
            code = match.group(1) if match else "unknown error page"
        info["error"] = code
        return info

    # -- actions --------------------------------------------------------------------------

    def fetch(self) -> dict[str, Any]:
        self.mark("load")
        info = self.load(self.req["url"])
        self.screenshot(self.req.get("screenshot") or "page.png")
        self.mark("done")
        error = info.get("error")
        https = self.req["url"].startswith("https:")
        return {
            "url": self.req["url"],
            "final_url": info.get("final_url"),
            "title": info.get("title", ""),
            "text": info.get("text", ""),
            "http_status": info.get("http_status"),
            "error": error,
            "cert_error": error if error and CERT_ERROR.fullmatch(error) else None,
            "tls_trusted": bool(https and not error and info.get("secure_context")),
        }

    def lab_ready(self) -> None:
        """Wait until JupyterLab has rendered its shell (splash gone, main dock panel there)."""
        self.wait(
            "JupyterLab to load (#jp-main-dock-panel, no splash)",
            lambda: self.js(
                "return !!document.querySelector('#jp-main-dock-panel')"
                " && !document.querySelector('#jupyterlab-splash')"
            ),
            timeout=90,
        )

    def dismiss_dialogs(self) -> bool:
        """Accept a dialog if one is open (a kernel choice: the preselected kernel). The
        workspace is reset first, so none is expected; one would block every click."""
        for button in self.visible(".jp-Dialog .jp-Dialog-button.jp-mod-accept"):
            button.click()
            return True
        return False

    def launcher_card(self, category: str, title: str | None, icon: str | None = None):
        """The launcher's card of a category (by title, else by icon, else the first)."""
        if not self.visible(LAUNCHER):
            self.open_launcher()
        cards = self.wait(
            f"a {category} card in the Launcher",
            lambda: self.visible(f'{LAUNCHER} .jp-LauncherCard[data-category="{category}"]'),
            timeout=30,
        )
        for card in cards:
            if title and card.get_attribute("title") == title:
                return card
        for card in cards:
            if icon and card.find_elements(By.CSS_SELECTOR, f'[data-icon="{icon}"]'):
                return card
        if title:
            names = [c.get_attribute("title") for c in cards]
            raise StepFailed(f"no Launcher card {title!r} in category {category}: {names}")
        return cards[0]

    def open_launcher(self) -> None:
        """A new Launcher tab: the main area's + button, else File > New Launcher's
        shortcut (Ctrl+Shift+L)."""
        buttons = self.visible("#jp-main-dock-panel .lm-TabBar-addButton")
        if buttons:
            buttons[0].click()
        else:
            self.driver.find_element(By.TAG_NAME, "body").send_keys(Keys.CONTROL + Keys.SHIFT + "l")
        self.wait("a Launcher to open", lambda: self.visible(LAUNCHER), timeout=20)

    def notebook(self) -> dict[str, Any]:
        req = self.req
        self.mark("new-notebook")
        self.launcher_card("Notebook", req.get("kernel_name")).click()
        panel = self.wait(
            "the new notebook to open",
            lambda: self.visible(NOTEBOOK, settle=True),
            timeout=60,
        )[0]
        editor = self.wait(
            "the first cell's editor",
            lambda: self.visible(".jp-Cell .cm-content", within=panel),
            timeout=30,
        )[0]
        # Shift+Enter before the kernel is connected advances the cell without running it:
        # wait for the toolbar's execution indicator to say idle with a kernel named (it
        # also says idle at first, while the toolbar's kernel name is still "No Kernel").
        self.mark("kernel-idle")
        self.wait("the notebook's kernel to be idle", lambda: self.kernel_idle(panel), timeout=90)
        self.mark("run-cell")
        editor.click()
        self.wait(
            "the cell editor to take focus",
            lambda: self.js(
                "return document.activeElement && !!document.activeElement.closest('.cm-content')"
            ),
            timeout=10,
        )
        # Typed as text input (as an IME or a paste delivers it): CodeMirror's bracket
        # closing and auto-indent would otherwise rewrite the code key by key.
        self.driver.execute_cdp_cmd("Input.insertText", {"text": req["cell_code"]})
        typed = self.js("return arguments[0].innerText", editor)
        if typed.strip() != req["cell_code"].strip():
            raise StepFailed(f"the cell holds {typed!r}, not the code typed")
        editor.send_keys(Keys.SHIFT + Keys.ENTER)
        expect = list(req.get("expect_in_output") or [])
        output_css = ".jp-Cell:first-child .jp-OutputArea"
        prompt_css = ".jp-Cell:first-child .jp-InputPrompt"

        def started() -> bool:
            prompt = panel.find_elements(By.CSS_SELECTOR, prompt_css)
            areas = panel.find_elements(By.CSS_SELECTOR, output_css)
            return bool(
                (prompt and prompt[0].text.strip() not in ("", "[ ]:")) or (areas and areas[0].text)
            )

        retried = False
        try:
            self.wait("the cell to start running ([*]: or a number)", started, timeout=10)
        except StepFailed:
            # Dropped (no kernel yet when the keys came): run the same cell once more.
            retried = True
            editor.click()
            editor.send_keys(Keys.SHIFT + Keys.ENTER)

        finished_at: list[float] = []

        def output() -> str | None:
            self.dismiss_dialogs()
            areas = panel.find_elements(By.CSS_SELECTOR, output_css)
            text = areas[0].text if areas else ""
            if text and all(e in text for e in expect):
                return text
            # The cell has finished ([N]:) without it: give late output 3 s, not the timeout.
            prompt = panel.find_elements(By.CSS_SELECTOR, prompt_css)
            if prompt and re.fullmatch(r"\[\d+\]:", prompt[0].text.strip()):
                finished_at[:] = finished_at or [time.monotonic()]
                if time.monotonic() - finished_at[0] > 3:
                    raise StepFailed(
                        f"the cell finished ({prompt[0].text.strip()}) "
                        f"without {expect} in its output"
                    )
            return None

        try:
            text = self.wait(f"the cell's output to contain {expect}", output)
        except StepFailed as exc:
            areas = panel.find_elements(By.CSS_SELECTOR, output_css)
            seen = areas[0].text if areas else ""
            raise StepFailed(f"{exc}; the output area shows {seen!r}") from None
        prompt = panel.find_elements(By.CSS_SELECTOR, prompt_css)
        self.mark("notebook-screenshot")
        self.screenshot("notebook.png")
        return {
            "notebook_output": text,
            "execution_prompt": prompt[0].text if prompt else "",
            "cell_run_retried": retried,
        }

    def kernel_idle(self, panel) -> bool:
        self.dismiss_dialogs()
        return bool(
            self.js(
                """
            const p = arguments[0];
            const ei = p.querySelector('.jp-Notebook-ExecutionIndicator');
            const kn = p.querySelector('.jp-Toolbar-kernelName');
            const name = kn ? (kn.getAttribute('aria-label') || kn.textContent || '') : '';
            return !!ei && ei.dataset.status === 'idle' && !!name.trim()
                && name.trim() !== 'No Kernel';
            """,
                panel,
            )
        )

    def terminal_text(self, term) -> tuple[str, str | None]:
        """The terminal's text and where it was read: xterm's accessibility tree (the
        terminal's screenReaderMode setting) or the DOM renderer's rows."""
        for css, source in (
            (".xterm-accessibility-tree", "accessibility-tree"),
            (".xterm-rows", "dom-rows"),
        ):
            found = term.find_elements(By.CSS_SELECTOR, css)
            if found:
                text = self.js(
                    "return arguments[0].textContent === '' ? '' : "
                    "Array.from(arguments[0].children).map("
                    "r => r.textContent.replace(/\\u00a0/g, ' ').trimEnd()"
                    ").join('\\n')",
                    found[0],
                )
                if text.strip():
                    return text, source
        return "", None

    def has_dom_text(self, term) -> bool:
        """Whether xterm keeps the terminal's text in the DOM: its accessibility tree
        (screenReaderMode) or the DOM renderer's rows. Decided once xterm has rendered."""
        self.wait(
            "xterm to render (.xterm-screen)",
            lambda: term.find_elements(By.CSS_SELECTOR, ".xterm-screen"),
            timeout=60,
        )
        return bool(term.find_elements(By.CSS_SELECTOR, ".xterm-accessibility-tree, .xterm-rows"))

    def open_terminal(self):
        card = self.launcher_card("Other", "Start a new terminal session", "ui-components:terminal")
        card.click()
        return self.wait("the terminal to open", lambda: self.visible(TERMINAL), timeout=60)[0]

    def enable_screen_reader_mode(self) -> None:
        """Turn the terminal's screenReaderMode on through JupyterLab's settings API, then
        reload: only when asked (the image should ship it in overrides.json)."""
        status = self.driver.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            const cfg = JSON.parse(document.getElementById('jupyter-config-data').textContent);
            const m = document.cookie.match(/(?:^|;\\s*)_xsrf=([^;]+)/);
            fetch(cfg.baseUrl + arguments[0], {
              method: 'PUT', credentials: 'same-origin',
              headers: {'Content-Type': 'application/json',
                        'X-XSRFToken': m ? decodeURIComponent(m[1]) : ''},
              body: JSON.stringify({raw: '{"screenReaderMode": true}'}),
            }).then(r => done(r.status), e => done(String(e)));
            """,
            TERMINAL_SETTINGS,
        )
        if status != 204:
            raise StepFailed(f"PUT {TERMINAL_SETTINGS} answered {status}")
        self.driver.refresh()
        self.lab_ready()

    def terminal(self) -> dict[str, Any]:
        req = self.req
        self.mark("open-terminal")
        term = self.open_terminal()
        if not self.has_dom_text(term):
            if not req.get("screen_reader_fallback"):
                raise StepFailed(
                    "the terminal has no text in the DOM (no .xterm-accessibility-tree, no "
                    ".xterm-rows): JupyterLab draws it with WebGL or a canvas unless the "
                    "terminal's screenReaderMode is on; ship "
                    '{"@jupyterlab/terminal-extension:plugin": {"screenReaderMode": true}} in '
                    "<sys.prefix>/share/jupyter/lab/settings/overrides.json"
                )
            self.mark("enable-screen-reader")
            self.enable_screen_reader_mode()
            term = self.open_terminal()
            if not self.has_dom_text(term):
                raise StepFailed("still no .xterm-accessibility-tree with screenReaderMode set")
            fallback = " (screenReaderMode set through the settings API)"
        else:
            fallback = ""
        self.mark("terminal-prompt")
        # Typed keys are lost before the terminal's websocket is up: wait for the prompt.
        reader = self.wait("the terminal's prompt", lambda: self.terminal_text(term)[1], timeout=60)
        reader += fallback
        self.mark("run-command")
        command = req.get("terminal_command") or "hostname"
        expect = req.get("expect_in_terminal") or ""
        textarea = term.find_element(By.CSS_SELECTOR, "textarea.xterm-helper-textarea")
        term.click()
        textarea.send_keys(command)
        textarea.send_keys(Keys.ENTER)

        def ran() -> tuple[str, str] | None:
            text = self.terminal_text(term)[0]
            out = command_output(text, command)
            return (text, out) if out is not None and expect in out else None

        try:
            text, out = self.wait(f"{expect!r} in the output of {command!r}", ran)
        except StepFailed as exc:
            raise StepFailed(f"{exc}; the terminal shows:\n{self.terminal_text(term)[0]}") from None
        self.mark("terminal-screenshot")
        self.screenshot("terminal.png")
        return {"terminal_text": text.rstrip(), "terminal_output": out, "terminal_reader": reader}

    def jupyter(self) -> dict[str, Any]:
        self.mark("load")
        info = self.load(self.req["url"])
        if info.get("error"):
            raise StepFailed(f"{self.req['url']} did not load: {info['error']}")
        if (info.get("http_status") or 0) >= 400:
            raise StepFailed(f"{self.req['url']} answered {info['http_status']}, not JupyterLab")
        self.mark("lab-ready")
        self.lab_ready()
        if self.req.get("reset_workspace", True):
            # A clean workspace: a restored one reopens earlier tabs, and notebooks whose
            # kernels are gone ask for one in modal dialogs that block every click.
            self.mark("reset-workspace")
            self.driver.get(self.js("return location.origin + location.pathname") + "?reset")
            self.lab_ready()
            self.wait(
                "the Launcher of the reset workspace", lambda: self.visible(LAUNCHER), timeout=30
            )
        result: dict[str, Any] = {
            "url": self.req["url"],
            "final_url": self.driver.current_url,
            "http_status": info.get("http_status"),
            "tls_trusted": bool(self.req["url"].startswith("https:") and info["secure_context"]),
        }
        result.update(self.notebook())
        if self.req.get("terminal_command") is not None:
            result.update(self.terminal())
        self.mark("done")
        return result

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        try:
            self.mark("start-browser")
            self.start()
            result = getattr(self, self.req["action"])()
            result["ok"] = True
        except Exception as exc:
            detail = exc.args[0] if isinstance(exc, StepFailed) else traceback.format_exc()
            if isinstance(exc, WebDriverException) and not isinstance(exc, TimeoutException):
                detail = f"{type(exc).__name__}: {exc.msg}"
            result = {"ok": False, "step": self.step, "error": detail}
            if self.driver is not None:
                result["page_text"] = self.page_text()[-4000:]
                with contextlib.suppress(WebDriverException):
                    result["final_url"] = self.driver.current_url
                self.screenshot("failure.png")
                try:
                    self.save_text("failure.html", self.driver.page_source)
                    logs = self.driver.get_log("browser")
                    self.save_text(
                        "console.log",
                        "\n".join(f"{e.get('level')} {e.get('message')}" for e in logs),
                    )
                except WebDriverException:
                    pass
        finally:
            self.mark("end")
            if self.driver is not None:
                with contextlib.suppress(WebDriverException):
                    self.driver.quit()
        self.timings["total"] = round(time.monotonic() - started, 2)
        result["timings"] = self.timings
        result["artifacts"] = self.saved
        return result


def command_output(text: str, command: str) -> str | None:
    """The lines a command printed: those after the last line that ends with the command
    (its echo after the prompt), up to the next prompt (a line starting like that one).
    None while the command's line is not there yet."""
    lines = text.splitlines()
    at = next(
        (i for i in range(len(lines) - 1, -1, -1) if lines[i].rstrip().endswith(command)), None
    )
    if at is None:
        return None
    prompt = lines[at].rstrip()[: -len(command)].rstrip()
    out = []
    for line in lines[at + 1 :]:
        if prompt and line.startswith(prompt):
            break
        out.append(line)
    return "\n".join(out).strip("\n")


def main() -> int:
    req = json.loads(Path(sys.argv[1]).read_text())
    os.environ["HOME"] = req["home"]  # Chromium's NSS db: $HOME/.pki/nssdb
    for var in (
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
    ):
        os.environ.pop(var, None)
    if req.get("artifacts_dir"):
        Path(req["artifacts_dir"]).mkdir(parents=True, exist_ok=True)
    result = Runner(req).run()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
