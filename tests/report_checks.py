#!/usr/bin/env python3
"""Checks of graphcheck's report files, run by ctest (tests/CMakeLists.txt).

  schema SCHEMA REPORT...         each JSON report is valid against the JSON Schema (jsonschema)
  trace TRACE...                  Chrome trace-event JSON: required fields, X events nest per thread
  html PAGE [--screenshot PNG] [--expect CSS_CLASS ...]
                                  headless Chromium opens the page: no console message, and each
                                  expected element class is in the DOM after its script ran
  golden ACTUAL GOLDEN [--replace TEXT=TOKEN ...]
                                  ACTUAL, with times, dates, addresses (and TEXT) normalised, equals
                                  GOLDEN; GRAPHCHECK_UPDATE_GOLDEN=1 rewrites GOLDEN instead
  plant-regression REPORT OUT     OUT: REPORT with every model time x3 and every peak x2 (for
                                  `graphcheck compare`)

Exit 0: the check held; 1: it failed (the reason on stderr); 77: it cannot run here (the reason
on stderr; ctest reports the test as skipped).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def fail(msg):
    print(f"report_checks: {msg}", file=sys.stderr)
    sys.exit(1)


def cmd_schema(args):
    try:
        import jsonschema
    except ImportError:
        fail("the Python package jsonschema is missing: ci/setup.sh installs it into the venv")
    schema = json.load(open(args.schema))
    validator = jsonschema.Draft202012Validator(schema)
    bad = 0
    for path in args.reports:
        doc = json.load(open(path))
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        for e in errors[:20]:
            print(f"{path}: {'/'.join(map(str, e.path)) or '(root)'}: {e.message}", file=sys.stderr)
        bad += len(errors)
        print(f"{path}: {'valid' if not errors else f'{len(errors)} schema errors'} "
              f"({len(doc.get('scenarios', []))} scenarios)")
    if bad:
        fail(f"{bad} schema errors")


def cmd_trace(args):
    for path in args.traces:
        doc = json.load(open(path))
        events = doc.get("traceEvents")
        if not isinstance(events, list) or not events:
            fail(f"{path}: no traceEvents")
        threads = {}
        kinds = {}
        for e in events:
            for key in ("ph", "pid", "tid", "name"):
                if key not in e:
                    fail(f"{path}: an event lacks '{key}': {e}")
            kinds[e["ph"]] = kinds.get(e["ph"], 0) + 1
            if e["ph"] == "X":
                if not (isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))):
                    fail(f"{path}: X event without numeric ts/dur: {e}")
                if e["dur"] < 0:
                    fail(f"{path}: negative duration: {e}")
                threads.setdefault((e["pid"], e["tid"]), []).append(e)
            elif e["ph"] == "i":
                if "ts" not in e:
                    fail(f"{path}: instant event without ts: {e}")
        # Complete events on one thread must nest (the viewers draw them as a stack).
        for key, evs in threads.items():
            evs.sort(key=lambda e: (e["ts"], -e["dur"]))
            stack = []
            for e in evs:
                while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 0.2:
                    stack.pop()
                if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + 0.2:
                    fail(f"{path}: pid {key[0]} tid {key[1]}: '{e['name']}' at {e['ts']} overlaps "
                         f"'{stack[-1]['name']}' without nesting in it")
                stack.append(e)
        if not kinds.get("X"):
            fail(f"{path}: no complete (X) events")
        print(f"{path}: {len(events)} events {dict(sorted(kinds.items()))}, {len(threads)} threads, nesting ok")


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def cmd_html(args):
    chromium = find_chromium()
    if not chromium:
        print("SKIPPED: no chromium on PATH (ci/setup.sh installs Debian's chromium for this test)",
              file=sys.stderr)
        sys.exit(SKIP)
    page = os.path.abspath(args.page)
    url = "file://" + page
    with tempfile.TemporaryDirectory() as profile:
        base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-extensions", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
                "--enable-logging=stderr", "--v=0"]
        run = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            fail(f"chromium exited {run.returncode}: {run.stderr[-2000:]}")
        console = [l for l in run.stderr.splitlines() if ":CONSOLE" in l]
        if console:
            fail(f"{page}: the page wrote to the console:\n" + "\n".join(console))
        dom = run.stdout
        for cls in args.expect or []:
            if not re.search(r'class="[^"]*\b' + re.escape(cls) + r'\b', dom):
                fail(f"{page}: no element of class '{cls}' in the DOM")
        if "<svg" not in dom:
            fail(f"{page}: no SVG in the DOM")
        print(f"{page}: {len(dom)} bytes of DOM, no console message, found: {', '.join(args.expect or [])}")
        if args.screenshot:
            shot = subprocess.run(base + ["--hide-scrollbars", f"--window-size={args.window}",
                                          f"--screenshot={os.path.abspath(args.screenshot)}", url],
                                  capture_output=True, text=True, timeout=120)
            if shot.returncode != 0 or not os.path.getsize(args.screenshot):
                fail(f"no screenshot: {shot.stderr[-2000:]}")
            print(f"screenshot: {args.screenshot} ({os.path.getsize(args.screenshot)} bytes)")


def normalise(text, replacements):
    for pair in replacements or []:
        old, _, token = pair.partition("=")
        text = text.replace(old, token)
    text = re.sub(r"0x[0-9a-fA-F]{6,}", "0x<addr>", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<date>", text)
    text = re.sub(r"\b\d+(\.\d+)? (s|ms|µs)\b", "<time>", text)
    text = re.sub(r"`(gcc|clang) [0-9.]+`", "`<compiler>`", text)
    text = re.sub(r"libtorch `[0-9.]+`", "libtorch `<version>`", text)
    text = re.sub(r"cuda_build `\w+`", "cuda_build `<yes|no>`", text)
    text = re.sub(r"graphcheck `[0-9.]+`", "graphcheck `<version>`", text)
    return text


def cmd_golden(args):
    actual = normalise(open(args.actual, encoding="utf-8").read(), args.replace)
    if os.environ.get("GRAPHCHECK_UPDATE_GOLDEN") == "1":
        open(args.golden, "w", encoding="utf-8").write(actual)
        print(f"rewrote {args.golden}")
        return
    want = open(args.golden, encoding="utf-8").read()
    if actual != want:
        import difflib
        diff = "".join(difflib.unified_diff(want.splitlines(True), actual.splitlines(True),
                                            args.golden, args.actual + " (normalised)", n=2))
        fail(f"{args.actual} differs from {args.golden} (GRAPHCHECK_UPDATE_GOLDEN=1 rewrites it "
             f"if the change is intended):\n{diff[:6000]}")
    print(f"{args.actual}: equals {args.golden} after normalisation")


def cmd_plant(args):
    doc = json.load(open(args.report))
    for s in doc["scenarios"]:
        s["seconds"] *= 3
        for m in s["measurements"]:
            if m["tag"].startswith("gc/timing/") and m["value"] is not None:
                m["value"] *= 3
            if m["tag"].startswith("gc/memory/") and m["tag"].endswith("/peak_bytes") and m["value"] is not None:
                m["value"] *= 2
    json.dump(doc, open(args.out, "w"), indent=1)
    print(f"{args.out}: {args.report} with model times x3 and peak memory x2")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("schema"); s.add_argument("schema"); s.add_argument("reports", nargs="+")
    s.set_defaults(fn=cmd_schema)
    s = sub.add_parser("trace"); s.add_argument("traces", nargs="+"); s.set_defaults(fn=cmd_trace)
    s = sub.add_parser("html"); s.add_argument("page"); s.add_argument("--screenshot")
    s.add_argument("--window", default="1400,1300"); s.add_argument("--expect", nargs="*")
    s.set_defaults(fn=cmd_html)
    s = sub.add_parser("golden"); s.add_argument("actual"); s.add_argument("golden")
    s.add_argument("--replace", nargs="*"); s.set_defaults(fn=cmd_golden)
    s = sub.add_parser("plant-regression"); s.add_argument("report"); s.add_argument("out")
    s.set_defaults(fn=cmd_plant)
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
