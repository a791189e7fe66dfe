#!/usr/bin/env python3
"""Every fenced block of README.md and docs/*.md runs, is compared or is marked illustrative.

    doc_blocks.py REPO_ROOT BUILD_DIR [--python PY] [--jobs N] [--check-marks-only]

The convention (docs/testing.md, "Doc blocks"): the nearest non-blank line above a block's
opening fence is one HTML comment, visible in the Markdown source and hidden when rendered:

  <!-- doc-test: run -->                       the block runs as written (sh: bash -e; python:
                                               PY with build/python on PYTHONPATH)
  <!-- doc-test: run; replace 'A' with 'B' -->  the same, after the named edits (fewer steps,
                                               a fixture for a placeholder file); any number
  <!-- doc-test: output of 'CMD'; any 'X' -->   quoted output: CMD runs (edits allowed as above)
                                               and every line of the block must appear in its
                                               output, in order; each literal X named by `any`
                                               (a machine-dependent or shortened figure) matches
                                               any number there
  <!-- doc-test: excerpt of FILE -->           a code excerpt: every zoe_* name it uses must
                                               appear in FILE
  <!-- doc-test: illustrative: WHY -->         not run; WHY says why (needs a GPU, a 1B model)

Blocks run in a scratch copy of the repository (directories of symlinks; build/ is BUILD_DIR,
out/ is empty, the build's tools are on PATH), one scratch per Markdown file, files in parallel.
scripts/build there only checks that BUILD_DIR holds the programs (ctest runs after the build),
and scripts/demo runs once per argument list for the whole test: a second call with the same
arguments replays the first one's output and out/ (the README's and docs/generate.md's demo).
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

MARK = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```+\s*([\w+-]*)")
NUMBER = r"[-+]?[0-9][0-9.,]*(?:e[-+]?[0-9]+)?"
HOW = """  Say what the doc test does with it on the line just above the opening fence, one of:
    <!-- doc-test: run -->                        runs as written (sh or python)
    <!-- doc-test: run; replace 'A' with 'B' -->  runs after the edits (fewer steps, a fixture)
    <!-- doc-test: output of 'CMD'; any 'X' -->   quoted output of CMD; X: a figure that varies
    <!-- doc-test: excerpt of FILE -->            code whose zoe_* names FILE uses
    <!-- doc-test: illustrative: WHY -->          not run (say why: a GPU, a 70B model ...)
  (docs/testing.md, "Doc blocks"; the test: tests/docs/doc_blocks.py)"""


class Block:
    def __init__(self, path, line, lang, body, mark):
        self.path, self.line, self.lang, self.body, self.mark = path, line, lang, body, mark

    def where(self):
        return f"{self.path}:{self.line}"


def blocks_of(root, rel):
    """The fenced blocks of one Markdown file with the marks above them."""
    lines = open(os.path.join(root, rel), encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1  # the closing fence
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        mark = MARK.match(lines[j]) if j >= 0 else None
        out.append(Block(rel, start + 1, lang, "\n".join(body) + "\n", mark.group(1) if mark else None))
    return out


def quoted(clause, word):
    """The quoted strings after WORD in a clause: "replace 'A' with 'B'" -> ['A', 'B']."""
    return re.findall(r"'((?:[^'\\]|\\.)*)'", clause[len(word):])


def parse_mark(b):
    """(kind, details) of a block's mark, or an error message."""
    if b.mark is None:
        return None, "has no doc-test mark"
    if b.mark.startswith("illustrative"):
        why = b.mark[len("illustrative"):].lstrip(":").strip()
        return ("illustrative", why) if why else (None, "is illustrative without saying why")
    clauses = [c.strip() for c in b.mark.split(";") if c.strip()]
    head, rest = clauses[0], clauses[1:]
    d = {"replace": [], "any": []}
    for c in rest:
        if c.startswith("replace "):
            q = quoted(c, "replace")
            if len(q) != 2 or " with " not in c:
                return None, f"mark clause '{c}' is not: replace 'A' with 'B'"
            d["replace"].append((q[0], q[1]))
        elif c.startswith("any "):
            q = quoted(c, "any")
            if len(q) != 1:
                return None, f"mark clause '{c}' is not: any 'X'"
            d["any"].append(q[0])
        else:
            return None, f"mark clause '{c}' is not replace '...' with '...' or any '...'"
    if head == "run":
        if b.lang not in ("sh", "bash", "python"):
            return None, f"is marked run but its fence says '{b.lang or 'nothing'}' (sh or python)"
        return "run", d
    if head.startswith("output of "):
        q = quoted(head, "output of")
        if len(q) != 1:
            return None, f"mark '{head}' is not: output of 'CMD'"
        d["cmd"] = q[0]
        return "output", d
    if head.startswith("excerpt of "):
        d["file"] = head[len("excerpt of "):].strip()
        return "excerpt", d
    return None, f"mark '{head}' is none of run, output of, excerpt of, illustrative"


def edited(text, replaces, b):
    for old, new in replaces:
        if old not in text:
            raise ValueError(f"{b.where()}: replace '{old}': the block no longer says it")
        text = text.replace(old, new)
    return text


DEMO_SHIM = r"""#!/usr/bin/env bash
# The doc test's scripts/demo: the real one once per argument list, replayed after that.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
key="$(printf '%s\n' "$@" | sha1sum | cut -c1-16)"
memo="$ZOE_DOC_MEMO/demo-$key"
exec 9>"$memo.lock"
flock 9
mkdir -p "$here/out"
if [ ! -e "$memo.rc" ]; then
  rc=0
  "$here/scripts/.demo" "$@" >"$memo.log" 2>&1 || rc=$?
  mkdir -p "$memo.out" && cp -a "$here/out/." "$memo.out/"
  echo "$rc" >"$memo.rc"
else
  cp -a "$memo.out/." "$here/out/"
fi
cat "$memo.log"
exit "$(cat "$memo.rc")"
"""

BUILD_SHIM = r"""#!/usr/bin/env bash
# The doc test's scripts/build: ctest runs after the build, so the programs are there already.
here="$(cd "$(dirname "$0")/.." && pwd)"
for t in zoe-train zoe-generate zoe-plan zoe-ckpt zoe-data; do
  [ -x "$here/build/tools/$t/$t" ] || { echo "doc test: $here/build has no $t" >&2; exit 1; }
done
"""


def scratch(root, build, tmp, name):
    """A copy of the repository made of symlinks, with build/ the build and out/ empty."""
    s = os.path.join(tmp, name)
    os.mkdir(s)
    skip = {".git", "build", "out", os.path.basename(build)} if os.path.dirname(build) == root else {".git", "build", "out"}
    for e in sorted(os.listdir(root)):
        src = os.path.join(root, e)
        if e in skip:
            continue
        if os.path.isdir(src):
            os.mkdir(os.path.join(s, e))
            for c in os.listdir(src):
                os.symlink(os.path.join(src, c), os.path.join(s, e, c))
        else:
            os.symlink(src, os.path.join(s, e))
    os.symlink(build, os.path.join(s, "build"))
    os.mkdir(os.path.join(s, "out"))
    sc = os.path.join(s, "scripts")
    os.rename(os.path.join(sc, "demo"), os.path.join(sc, ".demo"))
    for name_, text in (("demo", DEMO_SHIM), ("build", BUILD_SHIM)):
        p = os.path.join(sc, name_)
        if os.path.lexists(p):
            os.remove(p)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o755)
    return s


def run_text(lang, text, cwd, env, python, timeout):
    if lang == "python":
        cmd = [python, "-c", text]
    else:
        cmd = ["bash", "-c", "set -eo pipefail\n" + text]
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, text=True, errors="replace")
    return p.returncode, p.stdout


def line_pattern(line, anys):
    pat = re.escape(" ".join(line.split()))
    for a in anys:
        pat = pat.replace(re.escape(a), NUMBER)
    return re.compile(pat)


def compare(block_text, output, anys):
    """The first line of the block not found, in order, in the output (None: all found)."""
    out = [" ".join(l.split()) for l in output.split("\n")]
    k = 0
    for line in block_text.split("\n"):
        if not line.strip():
            continue
        pat = line_pattern(line, anys)
        while k < len(out) and not pat.search(out[k]):
            k += 1
        if k == len(out):
            return line
        k += 1
    return None


def check_file(rel, blocks, root, build, tmp, env, python, without_python, timeout):
    """Runs and compares one Markdown file's blocks; returns (lines of report, failures)."""
    report, fails = [], 0
    s = None
    for b in blocks:
        kind, d = parse_mark(b)
        if kind in ("illustrative", None):
            continue
        if kind == "excerpt":
            text = open(os.path.join(root, d["file"]), encoding="utf-8").read()
            missing = sorted(set(re.findall(r"\bzoe_\w+", b.body)) - set(re.findall(r"\bzoe_\w+", text)))
            if missing:
                report.append(f"FAIL {b.where()}: {d['file']} no longer uses {', '.join(missing)}")
                fails += 1
            else:
                report.append(f"ok   {b.where()}: excerpt of {d['file']}")
            continue
        if kind == "run" and b.lang == "python" and not python:
            if without_python:
                report.append(f"--   {b.where()}: a python block: this build has no Python module")
                continue
            report.append(f"FAIL {b.where()}: a python block, and no --python to run it with")
            fails += 1
            continue
        s = s or scratch(root, build, tmp, rel.replace("/", "_"))
        try:
            if kind == "run":
                rc, out = run_text(b.lang, edited(b.body, d["replace"], b), s, env, python, timeout)
                what = "ran"
            else:
                rc, out = run_text("sh", edited(d["cmd"], d["replace"], b), s, env, python, timeout)
                what = "compared"
        except ValueError as e:
            report.append(f"FAIL {e}")
            fails += 1
            continue
        except subprocess.TimeoutExpired:
            report.append(f"FAIL {b.where()}: ran past {timeout} s")
            fails += 1
            continue
        if rc != 0:
            # zoe's own lines say why; Open MPI's abort banner after them does not
            lines = out.rstrip().split("\n")
            ours = [l for l in lines if l.startswith(("zoe", "scripts/", "plot-loss", "Traceback"))]
            report.append(f"FAIL {b.where()}: exit {rc}; zoe's last lines, then the output's:\n" +
                          "\n".join("       " + l for l in ours[-4:] + ["..."] + lines[-4:]))
            fails += 1
            continue
        if kind == "output":
            miss = compare(b.body, out, d["any"])
            if miss is not None:
                report.append(f"FAIL {b.where()}: '{d['cmd']}' no longer prints: {miss.strip()}\n"
                              "       it printed (end):\n" +
                              "\n".join("       " + l for l in out.rstrip().split("\n")[-6:]))
                fails += 1
                continue
        report.append(f"ok   {b.where()}: {what}")
    return report, fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("build")
    ap.add_argument("--python", default="", help="the Python of build/python's package")
    ap.add_argument("--without-python", action="store_true",
                    help="a build without the Python module: its python blocks are counted, not run")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=400, help="seconds per block")
    ap.add_argument("--check-marks-only", action="store_true")
    ap.add_argument("--only", action="append", default=[], help="run these files' blocks only")
    a = ap.parse_args()
    root, build = os.path.realpath(a.root), os.path.realpath(a.build)
    files = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    by_file = {f: blocks_of(root, f) for f in files}
    if a.only:
        by_file = {f: bs for f, bs in by_file.items() if f in a.only}
    fails, n = 0, 0
    counts = {}
    for f, bs in by_file.items():
        for b in bs:
            n += 1
            kind, why = parse_mark(b)
            counts[kind] = counts.get(kind, 0) + 1
            if kind is None:
                print(f"FAIL {b.where()}: this ```{b.lang} block {why}.")
                fails += 1
    if fails:
        print(HOW)
    if a.check_marks_only:
        print(f"doc_blocks: {n} blocks, {fails} without a valid mark")
        return 1 if fails else 0
    env = dict(os.environ)
    tools = os.path.join(build, "tools")
    env["PATH"] = os.pathsep.join([os.path.join(tools, t) for t in sorted(os.listdir(tools))] + [env.get("PATH", "")])
    env["PYTHONPATH"] = os.path.join(build, "python")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OMP_WAIT_POLICY", "passive")
    with tempfile.TemporaryDirectory(prefix="zoe-doc-") as tmp:
        env["ZOE_DOC_MEMO"] = os.path.join(tmp, "memo")
        os.mkdir(env["ZOE_DOC_MEMO"])
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            futs = [pool.submit(check_file, f, bs, root, build, tmp, env, a.python,
                                a.without_python, a.timeout)
                    for f, bs in by_file.items()]
            for fut in futs:
                report, f_fails = fut.result()
                fails += f_fails
                for line in report:
                    print(line)
    print(f"doc_blocks: {n} blocks ({counts.get('run', 0)} run, {counts.get('output', 0)} outputs, "
          f"{counts.get('excerpt', 0)} excerpts, {counts.get('illustrative', 0)} illustrative); "
          f"{fails} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
