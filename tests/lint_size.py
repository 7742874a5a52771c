#!/usr/bin/env python3
"""ctest lint_size (label `lint`): no C++ source file over 600 lines and no function over 80,
tests aside (files named *_test.cc, and everything under tests/ or a testing/ directory).

A function is a brace block at namespace or class level whose header holds a parameter list; its
length counts from the line of its header's name to its closing brace. Comments, strings and
character literals are blanked first, so braces inside them do not count.

Usage: lint_size.py [SOURCE_DIR]   (default: the checkout holding this script)
"""
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


def blank(text):
    """The text with comments, string and character literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


SCOPE = re.compile(r"^\s*(template\s*<.*>\s*)?(namespace|class|struct|union|enum|extern)\b", re.S)


def long_functions(text):
    """(name, first line, length) of every function longer than MAX_FUNCTION_LINES."""
    code = blank(text)
    found = []
    stack = []  # per open brace: 'scope', or ('fn', name, start line), or 'block'
    header_start = 0
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c in ";":
            header_start = i + 1
        elif c == "{":
            in_fn = any(isinstance(s, tuple) for s in stack)
            header = code[header_start:i]
            if in_fn:
                stack.append("block")
            elif SCOPE.match(header) or "(" not in header or re.search(r"=\s*$", header):
                stack.append("scope")
            else:
                name = re.search(r"([~\w:]+)\s*\(", header)
                lead = header[: header.find(name.group(0))] if name else ""
                start = line - header.count("\n") + lead.count("\n")
                stack.append(("fn", name.group(1) if name else "?", start))
            header_start = i + 1
        elif c == "}":
            top = stack.pop() if stack else "scope"
            if isinstance(top, tuple):
                length = line - top[2] + 1
                if length > MAX_FUNCTION_LINES:
                    found.append((top[1], top[2], length))
            header_start = i + 1
    return found


def is_test(path):
    parts = path.split("/")
    return (path.endswith("_test.cc") or parts[0] == "tests" or "testing" in parts[:-1]
            or path.endswith("_fuzz.cc"))


def main():
    root = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    files = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "*.cc", "*.h"],
                           capture_output=True, text=True, check=True).stdout.split()
    bad = []
    checked = 0
    for f in files:
        if is_test(f) or f.startswith("build") or not os.path.isfile(os.path.join(root, f)):
            continue
        checked += 1
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            bad.append(f"{f}: {lines} lines (at most {MAX_FILE_LINES})")
        for name, start, length in long_functions(text):
            bad.append(f"{f}:{start}: {name} is {length} lines (at most {MAX_FUNCTION_LINES})")
    for b in bad:
        print("lint_size: " + b, file=sys.stderr)
    if checked == 0:
        print("lint_size: FAIL: no C++ file found under " + root, file=sys.stderr)
        return 1
    print(f"lint_size: {checked} files, {len(bad)} over the limits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
