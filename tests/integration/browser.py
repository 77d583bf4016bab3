"""A real browser (Debian's headless Chromium, driven by Selenium) for the integration tests:
open JupyterLab through the HTTPS app proxy, run a notebook cell and a terminal command, read
what they printed; or just fetch a page to see what the proxy answers (401/403 pages).

Why ``nsenter --net=/proc/PID/ns/net``: the app proxy admits traffic by where it comes from
(the lab's networks and firewall rules), so the browser has to be where a user is, not on
the host. Given the PID of the lab's ``user`` node container, the whole browser side
(browser_runner.py: the Selenium client, chromedriver listening on that namespace's
loopback, and Chromium) runs as one subprocess inside that container's network namespace.
Only the network namespace changes: the host's files (Chromium, this venv) stay in view.

Why certutil: the proxy's certificate is signed by the cluster's own CA, and the check must
be a real TLS verification (no ignore-certificate flag of any kind, insecure certificates
refused). Chromium on Linux takes extra trust anchors from the NSS database in
``$HOME/.pki/nssdb``, so each run gets a fresh temporary HOME whose NSS db trusts only our CA
(``certutil -A -t "C,,"``). ``trust_ca=False`` leaves it out: the negative control, where the
same page must fail with a certificate error (``ERR_CERT_AUTHORITY_INVALID``).

Needs (scripts/browser_setup.sh): chromium, chromium-driver (/usr/bin/chromedriver) and
libnss3-tools (certutil); selenium in .venv (requirements.txt). Root for nsenter (else
``sudo -n``). JupyterLab draws its terminal with WebGL or a canvas: its text is in the DOM
only with the terminal's ``screenReaderMode`` on, which the image ships in
``<sys.prefix>/share/jupyter/lab/settings/overrides.json``:
``{"@jupyterlab/terminal-extension:plugin": {"screenReaderMode": true}}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import pytest

RUNNER = Path(__file__).with_name("browser_runner.py")
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CERTUTIL = "certutil"


class BrowserCheckError(AssertionError):
    """The browser did not see what was expected. ``result`` holds what the runner returned
    (step, error, page_text, artifacts: failure.png, failure.html, console.log)."""

    def __init__(self, message: str, result: Optional[dict] = None):
        super().__init__(message)
        self.result = result or {}


def missing_tools() -> list[str]:
    """What this machine lacks for a browser check (empty when it can run)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if shutil.which(CERTUTIL) is None:
        missing.append("certutil (libnss3-tools)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip)")
    return missing


def require_browser() -> None:
    """Skip the calling test when the browser is not installed (scripts/browser_setup.sh)."""
    missing = missing_tools()
    if missing:
        pytest.skip(f"no browser here: {', '.join(missing)} missing (scripts/browser_setup.sh)")


def make_home(ca_pem: Optional[str | Path], trust_ca: bool = True) -> Path:
    """A fresh HOME for Chromium with an NSS database at .pki/nssdb that trusts ca_pem
    (as a CA for TLS servers) when trust_ca; an empty one otherwise."""
    home = Path(tempfile.mkdtemp(prefix="bai-browser-"))
    nssdb = home / ".pki" / "nssdb"
    nssdb.mkdir(parents=True)
    db = f"sql:{nssdb}"
    _run([CERTUTIL, "-N", "--empty-password", "-d", db])
    if trust_ca:
        if not ca_pem:
            raise ValueError("trust_ca needs ca_pem")
        _run([CERTUTIL, "-A", "-t", "C,,", "-n", "bai-ca", "-i", str(ca_pem), "-d", db])
    return home


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")


def run_browser(
    request: dict[str, Any],
    ca_pem: Optional[str | Path],
    netns_pid: Optional[int],
    *,
    trust_ca: bool = True,
    timeout: float = 120,
) -> dict[str, Any]:
    """Run browser_runner.py on request (its action and keys), inside the network namespace
    of netns_pid when given, with a fresh NSS db; the runner's result (ok true or false)."""
    home = make_home(ca_pem, trust_ca=trust_ca)
    try:
        req = dict(request, home=str(home), timeout=timeout)
        req_file = home / "request.json"
        req_file.write_text(json.dumps(req))
        argv = [sys.executable, str(RUNNER), str(req_file)]
        if netns_pid is not None:
            nsenter = ["nsenter", f"--net=/proc/{int(netns_pid)}/ns/net"]
            if os.geteuid() != 0:
                nsenter = ["sudo", "-n", *nsenter]
            argv = nsenter + argv
        # Its own process group: on a timeout, chromedriver and Chromium go with it.
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise BrowserCheckError(
                f"the browser runner did not finish within {timeout + 30:.0f}s; stderr:\n"
                f"{err[-3000:]}"
            ) from None
        finally:
            # Whatever the runner left behind (a Chromium it could not quit) goes too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise BrowserCheckError(
                f"the browser runner failed (rc {proc.returncode}; {' '.join(argv[:3])} ...):\n"
                f"{err[-3000:]}{out[-1000:]}"
            )
        return json.loads(lines[-1])
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _failed(what: str, result: dict[str, Any]) -> BrowserCheckError:
    page = (result.get("page_text") or "").strip()
    lines = [
        f"{what} failed at step {result.get('step')!r}: {result.get('error')}",
        f"page: {result.get('final_url', '?')}",
    ]
    if page:
        lines.append("page text (end):\n" + page[-1500:])
    if result.get("artifacts"):
        lines.append("artifacts: " + ", ".join(result["artifacts"]))
    lines.append(f"timings: {result.get('timings')}")
    return BrowserCheckError("\n".join(lines), result)


def jupyter_check(
    url: str,
    ca_pem: Optional[str | Path],
    netns_pid: Optional[int],
    artifacts_dir: Optional[str | Path],
    cell_code: str,
    expect_in_output: list[str],
    terminal_command: Optional[str] = "hostname",
    expect_in_terminal: str = "main1",
    *,
    kernel_name: str = "Python 3 (ipykernel)",
    trust_ca: bool = True,
    resolve: Optional[dict[str, str]] = None,
    screen_reader_fallback: bool = False,
    reset_workspace: bool = True,
    timeout: float = 150,
) -> dict[str, Any]:
    """Drive JupyterLab like a user: open url (with its ?token=...; the proxy's redirect
    and cookie are followed), wait for the lab, make a notebook from the Launcher's kernel
    card, type cell_code into the first cell, Shift+Enter, wait until the output shows every
    string of expect_in_output (screenshot notebook.png); then a terminal from the
    Launcher: type terminal_command + Enter, wait until the lines it printed contain
    expect_in_terminal (terminal.png). terminal_command=None skips the terminal.

    Returns {"url", "final_url", "http_status", "tls_trusted", "notebook_output",
    "execution_prompt", "terminal_text", "terminal_output", "terminal_reader", "timings",
    "artifacts"}. Raises BrowserCheckError (message: the step, what was seen, the page's
    text and artifacts failure.png / failure.html / console.log in artifacts_dir).

    resolve maps host names to addresses inside the browser (Chromium's
    --host-resolver-rules), for names the namespace's resolver does not know.
    screen_reader_fallback turns the terminal's screenReaderMode on through the settings API
    when the image did not (see the module's docstring). reset_workspace reloads the lab at
    <its URL>?reset after the first load (the token's redirect and cookie done): a restored
    workspace reopens earlier tabs, whose dead kernels ask for one in blocking dialogs.
    """
    request = {
        "action": "jupyter",
        "url": url,
        "artifacts_dir": str(artifacts_dir) if artifacts_dir else None,
        "cell_code": cell_code,
        "expect_in_output": list(expect_in_output),
        "terminal_command": terminal_command,
        "expect_in_terminal": expect_in_terminal,
        "kernel_name": kernel_name,
        "resolve": resolve or {},
        "screen_reader_fallback": screen_reader_fallback,
        "reset_workspace": reset_workspace,
    }
    result = run_browser(request, ca_pem, netns_pid, trust_ca=trust_ca, timeout=timeout)
    if not result.get("ok"):
        raise _failed(f"JupyterLab check of {url}", result)
    return result


def fetch_status(
    url: str,
    ca_pem: Optional[str | Path],
    netns_pid: Optional[int],
    artifacts_dir: Optional[str | Path] = None,
    *,
    trust_ca: bool = True,
    resolve: Optional[dict[str, str]] = None,
    screenshot: str = "page.png",
    timeout: float = 60,
) -> dict[str, Any]:
    """Open url in the same browser setup; what the page shows. Never raises for what the
    server answered (a 401/403 page, a certificate error): only when the browser itself
    could not run.

    Returns {"url", "final_url", "title", "text" (document.body.innerText), "http_status"
    (of the final document; None on an error page), "error" (Chromium's ERR_... code of an
    error page, else None), "cert_error" (the error when it is a certificate one, e.g.
    "ERR_CERT_AUTHORITY_INVALID"), "tls_trusted" (an https page loaded in a secure
    context), "timings", "artifacts"}.

    trust_ca=False is the negative control: without our CA, an https URL of the proxy must
    give tls_trusted False and a cert_error.
    """
    request = {
        "action": "fetch",
        "url": url,
        "artifacts_dir": str(artifacts_dir) if artifacts_dir else None,
        "resolve": resolve or {},
        "screenshot": screenshot,
    }
    result = run_browser(request, ca_pem, netns_pid, trust_ca=trust_ca, timeout=timeout)
    if not result.get("ok"):
        raise _failed(f"fetching {url}", result)
    return result
