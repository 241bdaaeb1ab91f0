#!/usr/bin/env python3
"""Runs the README's ```console blocks and compares what each command prints with what the block shows.

usage: readme_examples.py README WORKDIR

A block's lines starting with "$ " are commands (a trailing backslash continues one on the next line);
the lines after a command, up to the next command or the end of the block, are what it prints: its
stdout, then its stderr. The commands of all blocks run in order, in one bash process in WORKDIR (so a
variable set in one is seen by the next), with `fpgather` on PATH. A command must exit 0, or N when
its comment ends in "exit N".

Shown output is compared line by line after collapsing runs of blanks; a line "..." stands for any
number of lines. Integers must be equal. Other figures must agree within 2% (relative), except times,
which are not compared: a figure followed by "s" or "ms", and every figure of a line holding
"(median)". Exit 0 when every command matches, 1 otherwise (each difference printed).
"""
import os
import re
import subprocess
import sys

RTOL = 0.02
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
TIME = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?= ?m?s\b)")
EXIT = re.compile(r"#.*\bexit (\d+)\s*$")


def blocks(text):
    """[(line number, [lines])] of every ```console block."""
    out, lines, start = [], None, 0
    for n, line in enumerate(text.splitlines(), 1):
        if lines is None:
            if line.strip() == "```console":
                lines, start = [], n + 1
        elif line.strip() == "```":
            out.append((start, lines))
            lines = None
        else:
            lines.append(line)
    return out


def commands(text):
    """[(line number, command, expected exit status, [expected lines])]"""
    cmds = []
    for start, lines in blocks(text):
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                sys.exit(f"README line {start + i}: console block output before any command: {lines[i]!r}")
            n, cmd = start + i, lines[i][2:]
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            i += 1
            shown = []
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i])
                i += 1
            m = EXIT.search(cmd)
            cmds.append((n, cmd, int(m.group(1)) if m else 0, shown))
    return cmds


def tokens(line):
    """The line as text and figures: ([text pieces], [(figure, is_time)])."""
    line = " ".join(line.split())
    times = {m.start() for m in TIME.finditer(line)}
    median = "(median)" in line
    text, figures, at = [], [], 0
    for m in NUMBER.finditer(line):
        # a figure glued to a name (e4m3, fp32, step-00000008) is part of the text
        if (m.start() > 0 and line[m.start() - 1].isalnum() and line[m.start()] != "-") or \
           (m.end() < len(line) and (line[m.end()].isalpha() and line[m.end()] != "x")):
            continue
        text.append(line[at:m.start()])
        figures.append((m.group(), m.start() in times or median))
        at = m.end()
    text.append(line[at:])
    return text, figures


def same_line(want, got):
    wt, wf = tokens(want)
    gt, gf = tokens(got)
    if wt != gt or len(wf) != len(gf):
        return False
    for (w, is_time), (g, _) in zip(wf, gf):
        if is_time:
            continue
        if re.fullmatch(r"-?\d+", w) and re.fullmatch(r"-?\d+", g):
            if int(w) != int(g):
                return False
        elif abs(float(w) - float(g)) > RTOL * max(abs(float(w)), abs(float(g))):
            return False
    return True


def matches(shown, got):
    """Whether got (lines) matches shown, where a "..." line stands for any lines."""
    segments, seg = [], []
    for line in shown:
        if line.strip() == "...":
            segments.append(seg)
            seg = []
        else:
            seg.append(line)
    segments.append(seg)
    if len(segments) == 1:
        return len(got) == len(seg) and all(same_line(w, g) for w, g in zip(seg, got))
    first, middle, last = segments[0], segments[1:-1], segments[-1]
    if len(got) < len(first) or not all(same_line(w, g) for w, g in zip(first, got)):
        return False
    at, end = len(first), len(got) - len(last)
    if end < at or not all(same_line(w, g) for w, g in zip(last, got[end:])):
        return False
    for seg in middle:  # leftmost placement of each in turn is a match if any placement is
        for i in range(at, end - len(seg) + 1):
            if all(same_line(w, g) for w, g in zip(seg, got[i:i + len(seg)])):
                at = i + len(seg)
                break
        else:
            return False
    return True


def main():
    readme, work = sys.argv[1], sys.argv[2]
    cmds = commands(open(readme, encoding="utf-8").read())
    if not cmds:
        sys.exit("no ```console block in " + readme)
    script = []
    for k, (_, cmd, _, _) in enumerate(cmds):
        script.append(f"{{ {cmd}\n}} >.readme/out.{k} 2>.readme/err.{k} </dev/null; echo $? >.readme/rc.{k}")
    os.makedirs(os.path.join(work, ".readme"), exist_ok=True)
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=work, check=False)
    failures = 0
    for k, (n, cmd, rc_want, shown) in enumerate(cmds):
        def read(name):
            with open(os.path.join(work, ".readme", f"{name}.{k}"), encoding="utf-8", errors="replace") as f:
                return f.read()
        rc = int(read("rc"))
        got = (read("out") + read("err")).splitlines()
        problems = []
        if rc != rc_want:
            problems.append(f"exit status {rc}, want {rc_want}")
        if shown and not matches(shown, got):
            problems.append("output differs")
        if problems:
            failures += 1
            print(f"FAIL: README line {n}: $ {cmd}: {', '.join(problems)}")
            print("  shown:\n" + "".join(f"    {line}\n" for line in shown), end="")
            print("  printed:\n" + "".join(f"    {line}\n" for line in got[:40]), end="")
    print(f"{len(cmds) - failures} of {len(cmds)} README commands as shown")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
