#!/usr/bin/env python3
"""Checks of graphcheck's report files, run by ctest (tests/CMakeLists.txt).

  schema SCHEMA REPORT...         each JSON report is valid against the JSON Schema (jsonschema)
  trace TRACE...                  Chrome trace-event JSON: required fields, X events nest per thread
  html PAGE [--screenshot PNG] [--expect CSS_CLASS ...]
                                  headless Chromium opens the page: no console message, and each
                                  expected element class is in the DOM after its script ran
  golden ACTUAL GOLDEN [--replace TEXT=TOKEN ...] [--values]
                                  ACTUAL, with times, dates, addresses (and TEXT) normalised, equals
                                  GOLDEN; GRAPHCHECK_UPDATE_GOLDEN=1 rewrites GOLDEN instead
  plant-regression REPORT OUT     OUT: REPORT with every model time x3 and every peak x2 (for
                                  `graphcheck compare`)
  crashes JSON JUNIT              the crash run: segfault, abort and hang crashed for their
                                  reasons, every other scenario passed, JUnit agrees
  shards GC SCENARIOS FULL WORKDIR [--total N]
                                  runs GC once per shard; each scenario of FULL in exactly one
  interrupt GC WORKDIR STOPPED SCENARIO...
                                  SIGTERM to a run once a scenario passed: exit 143, reports
                                  valid and marked incomplete, STOPPED named as not run
  merge GC FULL WORKDIR [--total N]
                                  after `shards`: `graphcheck merge` of the shards' reports has the
                                  verdicts of FULL, compare reads it, a missing shard is named
  same A B [--replace-a T=X] [--replace-b T=X]
                                  two JSON reports equal apart from times, addresses and paths

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
    # Why auto did not pick cuda depends on the build and the machine (no CUDA libtorch, no device).
    text = re.sub(r"\(auto: [^`]*, so the emulated backend \(CPU\) runs\)",
                  "(auto: <why not cuda>, so the emulated backend (CPU) runs)", text)
    text = re.sub(r"graphcheck `[0-9.]+`", "graphcheck `<version>`", text)
    return text


def normalise_values(text):
    """What depends on the checkpoint's fill, not on the bug: the size of an output difference
    (max abs, max rel) and how many output elements it reaches. Which tensors differ, and which
    rows of them (structural: "256 of 1024 elements, first at 768"), stay pinned, as do exact
    equalities ("max abs 0")."""
    text = re.sub(r"(?<![\w.])\d+\.\d+(e[-+]?\d+)?(?![\w.])", "<value>", text)
    return re.sub(r"\| mismatched_elements \| `\d+` \|", "| mismatched_elements | `<count>` |", text)


def cmd_golden(args):
    actual = normalise(open(args.actual, encoding="utf-8").read(), args.replace)
    if args.values:
        actual = normalise_values(actual)
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


def cmd_crashes(args):
    """The crash run's JSON and JUnit: each crashing scenario crashed for its reason, the rest passed."""
    doc = json.load(open(args.json))
    if not doc.get("complete"):
        fail(f"{args.json}: the run is marked incomplete: {doc.get('incomplete_reason')}")
    by_name = {s["name"]: s for s in doc["scenarios"]}
    want = {"crash-segfault": ("signal", "SIGSEGV"), "crash-abort": ("signal", "SIGABRT"),
            "crash-hang": ("timeout", "")}
    if args.sanitized:  # ASan reports the segfault itself and exits 3
        want["crash-segfault"] = ("exit", "")
    for name, (cause, sig) in want.items():
        s = by_name.get(name)
        if not s:
            fail(f"{args.json}: no record of {name}")
        crash = s.get("crash") or {}
        if s["status"] != "crashed" or crash.get("cause") != cause or sig not in crash.get("signal", ""):
            fail(f"{args.json}: {name}: status {s['status']}, crash {crash}; want crashed by {cause} {sig}")
        if not crash.get("last_phase"):
            fail(f"{args.json}: {name}: the crash record names no last phase")
        last_words = "AddressSanitizer" if args.sanitized and name == "crash-segfault" else "crash_test: about to"
        if name != "crash-hang" and last_words not in crash.get("stderr_tail", ""):
            fail(f"{args.json}: {name}: the stderr tail lacks the model's last words: {crash.get('stderr_tail')!r}")
    others = [s for s in doc["scenarios"] if s["name"] not in want]
    if not others or any(s["status"] != "passed" for s in others):
        fail(f"{args.json}: the other scenarios did not all pass: {[(s['name'], s['status']) for s in others]}")
    if doc["exit_code"] != 3 or doc["summary"]["crashed"] != 3:
        fail(f"{args.json}: exit_code {doc['exit_code']}, summary {doc['summary']}")
    junit = open(args.junit).read()
    if junit.count("<error ") != 3 or junit.count("<testcase ") != len(doc["scenarios"]):
        fail(f"{args.junit}: want 3 <error> and {len(doc['scenarios'])} test cases")
    print(f"{args.json}: 3 crashed (SIGSEGV, SIGABRT, timeout) with their last phase and output; "
          f"{len(others)} passed; JUnit has 3 errors")


def cmd_shards(args):
    """Runs the CLI once per shard; every scenario of the full report runs in exactly one shard."""
    full = [s["name"] for s in json.load(open(args.full))["scenarios"]]
    seen = {}
    for i in range(args.total):
        out = os.path.join(args.workdir, f"shard-{i}")
        cmd = [args.gc, "run", args.scenarios, "--report-dir", out, "-j", "2"]
        env = dict(os.environ)
        if i == 0:  # the gtest variables, as a sharding CI runner sets them
            env.update(GTEST_SHARD_INDEX="0", GTEST_TOTAL_SHARDS=str(args.total))
        else:
            cmd += ["--shard-index", str(i), "--total-shards", str(args.total)]
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if run.returncode != 0:
            fail(f"shard {i}: exit {run.returncode}\n{run.stdout[-3000:]}{run.stderr[-3000:]}")
        doc = json.load(open(os.path.join(out, "graphcheck.json")))
        if doc["shard"] != {"index": i, "total": args.total}:
            fail(f"shard {i}: the report says shard {doc['shard']}")
        names = [s["name"] for s in doc["scenarios"]]
        for n in names:
            if n in seen:
                fail(f"{n} ran in shard {seen[n]} and in shard {i}")
            seen[n] = i
        print(f"shard {i} of {args.total}: {len(names)} scenarios")
    missing = sorted(set(full) - set(seen))
    extra = sorted(set(seen) - set(full))
    if missing or extra:
        fail(f"missing from every shard: {missing}; not in the full run: {extra}")
    print(f"every one of {len(full)} scenarios ran in exactly one of {args.total} shards")


def verdicts_of(doc):
    """Per scenario (name, mutations): its status, the probes that failed, and its mutation verdicts."""
    out = {}
    for s in doc["scenarios"]:
        key = (s["name"], tuple(s.get("mutations", [])))
        out[key] = (s["status"], sorted({f["probe"] for f in s["findings"]}),
                    sorted((v["mutation"], v["ok"], sorted(v["caught"])) for v in s.get("verdicts", [])))
    return out


def cmd_merge(args):
    """`graphcheck merge` of the shards' reports (the shards check's WORKDIR/shard-i) gives the same
    verdicts as the unsharded FULL run, a report `compare` reads, and names a missing shard."""
    shards = [os.path.join(args.workdir, f"shard-{i}", "graphcheck.json") for i in range(args.total)]
    out = os.path.join(args.workdir, "merged")
    run = subprocess.run([args.gc, "merge", *shards, "--report-dir", out], capture_output=True, text=True, timeout=120)
    full = json.load(open(args.full))
    if run.returncode != full["exit_code"]:
        fail(f"merge exited {run.returncode}, the unsharded run {full['exit_code']}\n{run.stdout}{run.stderr}")
    merged = json.load(open(os.path.join(out, "graphcheck.json")))
    if not merged["complete"]:
        fail(f"the merged report says it is incomplete: {merged['incomplete_reason']}")
    for name in ("junit.xml", "graphcheck.md", "graphcheck.html", "graphcheck-trace.json"):
        if not os.path.exists(os.path.join(out, name)):
            fail(f"merge wrote no {name}")
    a, b = verdicts_of(full), verdicts_of(merged)
    if a != b:
        diff = sorted(set(a.items()) ^ set(b.items()))
        fail(f"the merged verdicts differ from the unsharded run's: {diff[:6]}")
    cmp = subprocess.run([args.gc, "compare", args.full, os.path.join(out, "graphcheck.json"),
                          "--max-regression", "1e6", "--min-seconds", "1e6", "--min-bytes", "1e15"],
                         capture_output=True, text=True, timeout=120)
    if cmp.returncode != 0:
        fail(f"compare of the unsharded and the merged report: exit {cmp.returncode}\n{cmp.stdout}{cmp.stderr}")
    # A missing shard is named, and the merge is a harness failure.
    partial = subprocess.run([args.gc, "merge", *shards[:-1], "--report-dir", os.path.join(args.workdir, "partial")],
                             capture_output=True, text=True, timeout=120)
    want = f"shard {args.total - 1} of {args.total} missing"
    if partial.returncode != 3 or want not in partial.stderr:
        fail(f"merge without the last shard: exit {partial.returncode}, expected 3 and '{want}'\n{partial.stderr}")
    print(f"{len(b)} scenarios merged from {args.total} shards: the same verdicts as the unsharded run; "
          "compare reads it; a missing shard is named")


def strip_volatile(doc, replacements):
    """A report without what legitimately differs between two runs: times, dates, addresses,
    paths, the run's settings."""
    volatile = {"seconds", "start", "started_at", "jobs", "log"}
    text = json.dumps(doc, sort_keys=True)
    for pair in replacements or []:
        old, _, token = pair.partition("=")
        text = text.replace(old, token)
    text = re.sub(r"0x[0-9a-fA-F]{6,}", "0x<addr>", text)
    doc = json.loads(text)

    def walk(x):
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                if k in volatile:
                    continue
                out[k] = walk(v)
            # Timings are measurements too.
            if isinstance(out.get("tag"), str) and (out["tag"].startswith("gc/timing/") or
                                                     out["tag"].startswith("gc/pass/") or
                                                     "seconds" in out["tag"] or
                                                     out.get("unit") in ("s", "ms", "us", "µs", "ns")):
                out.pop("value", None)
            return out
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x
    return walk(doc)


def cmd_same(args):
    a = strip_volatile(json.load(open(args.a)), args.replace_a)
    b = strip_volatile(json.load(open(args.b)), args.replace_b)
    if a != b:
        import difflib
        ta = json.dumps(a, indent=1, sort_keys=True).splitlines(True)
        tb = json.dumps(b, indent=1, sort_keys=True).splitlines(True)
        diff = "".join(difflib.unified_diff(ta, tb, args.a, args.b, n=2))
        fail(f"the two reports differ beyond times and addresses:\n{diff[:6000]}")
    print(f"{args.a} and {args.b}: identical apart from times, addresses and paths "
          f"({len(a.get('scenarios', []))} scenarios)")


def cmd_interrupt(args):
    """SIGTERM to a run with a scenario still going: it stops within seconds, exits 128+15, and
    leaves valid reports marked incomplete that hold what finished and name what did not."""
    import signal
    import time
    out = args.workdir
    shutil.rmtree(out, ignore_errors=True)
    report = os.path.join(out, "graphcheck.json")
    proc = subprocess.Popen([args.gc, "run", *args.scenarios, "--timeout", "0", "-j", "2", "--report-dir", out],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:  # until the well-behaved scenario is in the report
        try:
            if any(s["status"] == "passed" for s in json.load(open(report))["scenarios"]):
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    else:
        proc.kill()
        fail("no scenario finished within 120 s")
    sent = time.time()
    proc.send_signal(signal.SIGTERM)
    try:
        output, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail("the run did not stop within 30 s of SIGTERM")
    took = time.time() - sent
    if proc.returncode != 128 + signal.SIGTERM:
        fail(f"exit code {proc.returncode}, want {128 + signal.SIGTERM}:\n{output[-3000:]}")
    doc = json.load(open(report))
    if doc["complete"] or "SIGTERM" not in doc["incomplete_reason"] or args.stopped not in doc["incomplete_reason"]:
        fail(f"{report}: complete={doc['complete']}, incomplete_reason={doc['incomplete_reason']!r}")
    names = [(s["name"], s["status"]) for s in doc["scenarios"]]
    if not any(st == "passed" for _, st in names) or any(n == args.stopped for n, _ in names):
        fail(f"{report}: scenarios {names}")
    for f in ("graphcheck.md", "graphcheck.html"):
        if "ncomplete run" not in open(os.path.join(out, f), encoding="utf-8").read():
            fail(f"{f} does not say the run is incomplete")
    print(f"stopped {took:.1f} s after SIGTERM with exit {proc.returncode}; the reports hold {names} and say: "
          f"{doc['incomplete_reason']}")


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
    s.add_argument("--replace", nargs="*")
    s.add_argument("--values", action="store_true",
                   help="also normalise the values that depend on the checkpoint's fill")
    s.set_defaults(fn=cmd_golden)
    s = sub.add_parser("plant-regression"); s.add_argument("report"); s.add_argument("out")
    s.set_defaults(fn=cmd_plant)
    s = sub.add_parser("crashes"); s.add_argument("json"); s.add_argument("junit")
    s.add_argument("--sanitized", action="store_true", help="a sanitizer build: the segfault is ASan's report")
    s.set_defaults(fn=cmd_crashes)
    s = sub.add_parser("shards"); s.add_argument("gc"); s.add_argument("scenarios"); s.add_argument("full")
    s.add_argument("workdir"); s.add_argument("--total", type=int, default=3); s.set_defaults(fn=cmd_shards)
    s = sub.add_parser("merge"); s.add_argument("gc"); s.add_argument("full"); s.add_argument("workdir")
    s.add_argument("--total", type=int, default=3); s.set_defaults(fn=cmd_merge)
    s = sub.add_parser("same"); s.add_argument("a"); s.add_argument("b")
    s.add_argument("--replace-a", nargs="*"); s.add_argument("--replace-b", nargs="*")
    s.set_defaults(fn=cmd_same)
    s = sub.add_parser("interrupt"); s.add_argument("gc"); s.add_argument("workdir")
    s.add_argument("stopped"); s.add_argument("scenarios", nargs="+"); s.set_defaults(fn=cmd_interrupt)
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
