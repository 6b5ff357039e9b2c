#!/usr/bin/env python3
"""Sentence lengths of the guides, as a reader meets them: prose only.

Usage: python3 .ci/prose.py [--max-median N] [--max-paragraph N] [FILE.md ...]
       (default files: README.md and docs/*.md)

Code blocks (``` fences), tables (lines starting with |), headings, HTML comments and link
definitions are left out; list items and paragraphs are prose. A sentence ends at `.`, `!` or
`?` followed by a space or the paragraph's end (not inside `code`, and not after "e.g", "i.e",
"etc" or "vs"). Words are runs separated by whitespace; inline code counts as its words.
Prints, per file, the sentences, their median and 90th percentile in words, and the longest
paragraph; then the same over all files. With --max-median or --max-paragraph, exits 1 when a
file's median sentence or longest paragraph is over that many words (`make prose`, in CI).
"""
import glob
import re
import statistics
import sys

ABBREVIATIONS = ("e.g", "i.e", "etc", "vs", "cf")


def paragraphs(text):
    """The prose paragraphs of a markdown text, each as one line."""
    out, current, fenced = [], [], False
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            if current:
                out.append(" ".join(current))
                current = []
            continue
        if fenced:
            continue
        starts_item = re.match(r"^(\s*)([-*+]|\d+\.)\s+", line)
        if (not stripped or stripped.startswith("|") or stripped.startswith("#")
                or re.match(r"^\[[^\]]+\]:\s", stripped) or starts_item):
            if current:
                out.append(" ".join(current))
                current = []
            if starts_item:
                current = [stripped[starts_item.end() - len(starts_item.group(1)):]]
            continue
        current.append(stripped)
    if current:
        out.append(" ".join(current))
    return [p for p in out if p.strip()]


def sentences(paragraph):
    """The sentences of one paragraph."""
    # Inline code and link targets are not sentence ends.
    masked = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(".", "\x00").replace("?", "\x01").replace("!", "\x02"), paragraph)
    masked = re.sub(r"\]\([^)]*\)", lambda m: m.group(0).replace(".", "\x00"), masked)
    parts, start = [], 0
    for match in re.finditer(r"[.!?](?=\s|$)", masked):
        before = masked[start:match.start()]
        if any(before.endswith(a) for a in ABBREVIATIONS):
            continue
        parts.append(masked[start:match.end()])
        start = match.end()
    if masked[start:].strip():
        parts.append(masked[start:])
    return [p.strip() for p in parts if len(p.split()) > 0]


def words(sentence):
    return len(sentence.split())


def describe(name, lengths, longest):
    if not lengths:
        return f"{name}: no prose"
    lengths = sorted(lengths)
    p90 = lengths[min(len(lengths) - 1, int(len(lengths) * 0.9))]
    return (f"{name}: {len(lengths)} sentences, median {statistics.median(lengths):g} words, "
            f"90th percentile {p90}, longest paragraph {longest} words")


def main(args):
    bounds = {"--max-median": None, "--max-paragraph": None}
    files = []
    while args:
        arg = args.pop(0)
        if arg in bounds:
            bounds[arg] = float(args.pop(0))
        else:
            files.append(arg)
    if not files:
        files = ["README.md"] + sorted(glob.glob("docs/*.md"))
    everything, longest_all, over = [], 0, []
    for path in files:
        with open(path, encoding="utf-8") as f:
            found = paragraphs(f.read())
        lengths = [words(s) for p in found for s in sentences(p)]
        longest = max((words(p) for p in found), default=0)
        everything += lengths
        longest_all = max(longest_all, longest)
        print(describe(path, lengths, longest))
        median = statistics.median(lengths) if lengths else 0
        if bounds["--max-median"] is not None and median > bounds["--max-median"]:
            over.append(f"{path}: median sentence {median:g} words, over {bounds['--max-median']:g}")
        if bounds["--max-paragraph"] is not None and longest > bounds["--max-paragraph"]:
            over.append(f"{path}: a paragraph of {longest} words, over {bounds['--max-paragraph']:g}")
    print(describe("all", everything, longest_all))
    for line in over:
        print(line, file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
