"""Writes benchmark results into bench/RESULTS.md: shared by the summarize
scripts. Standard library only.

A script owns a "latest" section between its BEGIN and END marker lines
(replaced whole on every run) and, optionally, a history table between its
HIST_BEGIN and HIST_END markers (one row appended per run).
"""


def latest_head(begin, meta_args):
    """The first lines of a "latest run" section and its metadata: `begin`,
    a "### Latest run: <date>" heading, one "- key: value" line per
    "KEY=VALUE" of `meta_args` (in order; date and command left out) and
    the command in a code block. Returns (lines, {key: value})."""
    meta = [m.split("=", 1) for m in meta_args]
    md = dict(meta)
    lines = [begin, "", f"### Latest run: {md.get('date', '?')}", ""]
    lines += [f"- {k}: {v}" for k, v in meta if k not in ("command", "date")]
    lines += ["", "Command:", "", "```", md.get("command", "?"), "```", ""]
    return lines, md


def replace_section(text, begin, end, section, preamble=""):
    """`text` with everything from `begin` to `end` (both marker lines
    included in `section`) replaced by `section`; when the markers are not
    there yet, `preamble` (e.g. a heading and an introduction) and `section`
    are appended."""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        return head + section + tail
    return text.rstrip("\n") + "\n\n" + preamble + section + "\n"


def append_history_row(text, hist_begin, hist_end, row, new_table):
    """`text` with `row` added as the last row before `hist_end`; when the
    markers are not there yet, `new_table` (a heading, `hist_begin` and the
    table's header lines) is appended with the row and `hist_end`."""
    if hist_begin in text and hist_end in text:
        head, rest = text.split(hist_end, 1)
        return head.rstrip("\n") + "\n" + row + "\n" + hist_end + rest
    return text.rstrip("\n") + "\n\n" + new_table + row + "\n" + hist_end + "\n"


def update(path, transform):
    """Reads `path` (empty when missing), applies `transform` to its text,
    and writes the result back."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    with open(path, "w") as f:
        f.write(transform(text))
