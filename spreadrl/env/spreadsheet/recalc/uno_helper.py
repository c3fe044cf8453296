"""Drive one persistent headless LibreOffice over UNO: recalculate workbooks on request.

Run by :class:`spreadrl.env.spreadsheet.recalc.libreoffice.LibreOfficeServer` under the
system Python (``/usr/bin/python3``), the only one that has LibreOffice's
``uno`` module (Debian's python3-uno); it imports nothing from spreadrl.

Usage: ``python3 uno_helper.py SOFFICE PROFILE_DIR [LOCALE]`` (LOCALE, default en-US:
the locale TEXT and number formats are rendered in, spreadrl.env.spreadsheet.recalc.locales). It starts ``soffice``
listening on a private pipe, prints ``{"ready": true}`` and then answers
one JSON line per request line on stdin:
``{"src": "/abs/in.xlsx", "dst": "/abs/out.xlsx"}`` ->
``{"ok": true}`` or ``{"ok": false, "error": "..."}`` (with ``"crashed": true`` when
soffice died under the request: the helper then exits). The workbook is
loaded hidden with macros and link updates disabled (agent-written files are
hostile input), fully recalculated (``calculateAll``) and stored as xlsx.
On EOF it terminates soffice and exits.
"""

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid

_PROFILE_XCU = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode" oor:op="fuse"><value>1</value></prop></item>
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="ODFRecalcMode" oor:op="fuse"><value>1</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting"><prop oor:name="MacroSecurityLevel" oor:op="fuse"><value>3</value></prop></item>
</oor:items>
"""


def _prop(name, value):
    from com.sun.star.beans import PropertyValue

    prop = PropertyValue()
    prop.Name = name
    prop.Value = value
    return prop


_LOCALE_XCU = (
    '<item oor:path="/org.openoffice.Setup/L10N"><prop oor:name="ooSetupSystemLocale" '
    'oor:op="fuse"><value>{}</value></prop></item>\n'
)


def _connect(soffice, profile, locale="en-US"):
    import uno

    user = os.path.join(profile, "user")
    os.makedirs(user, exist_ok=True)
    with open(os.path.join(user, "registrymodifications.xcu"), "w") as handle:
        handle.write(
            _PROFILE_XCU.replace("</oor:items>", _LOCALE_XCU.format(locale) + "</oor:items>")
        )
    pipe = "spreadrl_" + uuid.uuid4().hex
    proc = subprocess.Popen(
        [
            soffice,
            "-env:UserInstallation=" + uno.systemPathToFileUrl(profile),
            "--headless",
            "--invisible",
            "--nologo",
            "--norestore",
            "--nodefault",
            "--nolockcheck",
            f"--accept=pipe,name={pipe};urp;StarOffice.ComponentContext",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    local = uno.getComponentContext()
    resolver = local.ServiceManager.createInstanceWithContext(
        "com.sun.star.bridge.UnoUrlResolver", local
    )
    deadline = time.time() + 90
    while True:
        try:
            ctx = resolver.resolve(f"uno:pipe,name={pipe};urp;StarOffice.ComponentContext")
            break
        except Exception as exc:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError(f"soffice did not start (exit {proc.poll()})") from exc
            time.sleep(0.2)
    desktop = ctx.ServiceManager.createInstanceWithContext("com.sun.star.frame.Desktop", ctx)
    return proc, desktop


def _recalculate(desktop, src, dst):
    import uno

    doc = desktop.loadComponentFromURL(
        uno.systemPathToFileUrl(src),
        "_blank",
        0,
        (
            _prop("Hidden", True),
            _prop("MacroExecutionMode", 0),  # NEVER_EXECUTE
            _prop("UpdateDocMode", 0),  # NO_UPDATE: no external links fetched
        ),
    )
    if doc is None:
        raise RuntimeError("LibreOffice could not open the file")
    try:
        doc.calculateAll()
        doc.storeToURL(
            uno.systemPathToFileUrl(dst), (_prop("FilterName", "Calc MS Excel 2007 XML"),)
        )
    finally:
        doc.close(True)


def _lost(proc, exc):
    """Whether ``exc`` came from losing soffice (killed, out of memory), not from the file:
    its process ended, or UNO's bridge to it is gone (DisposedException)."""
    time.sleep(0.2)  # the launcher notices its soffice.bin's death a moment later
    return proc.poll() is not None or "Disposed" in type(exc).__name__


def main():
    soffice, profile = sys.argv[1], sys.argv[2]
    locale = sys.argv[3] if len(sys.argv) > 3 else "en-US"
    out = sys.stdout
    try:
        proc, desktop = _connect(soffice, profile, locale)
    except Exception as exc:
        out.write(json.dumps({"ready": False, "error": str(exc)[:300]}) + "\n")
        out.flush()
        return 1
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                _recalculate(desktop, request["src"], request["dst"])
                reply = {"ok": True}
            except Exception as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
                if _lost(proc, exc):  # soffice died under the call: say so, then end
                    reply["crashed"] = True
            out.write(json.dumps(reply) + "\n")
            out.flush()
            if reply.get("crashed"):
                break
    finally:
        with contextlib.suppress(Exception):
            desktop.terminate()
        try:
            proc.wait(timeout=10)
        except Exception:
            proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
