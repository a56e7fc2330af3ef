"""Column alignment as Go's text/tabwriter does it (minwidth 0, padding 2, spaces, no flags).

gpushare's kubectl plugin prints through tabwriter; reproducing its column blocks is what makes
the output match the seeds character for character. Trailing spaces are dropped.
"""

from __future__ import annotations

PADDING = 2


def _format(
    lines: list[list[str]], widths: list[int], start: int, end: int, out: list[str]
) -> None:
    column = len(widths)
    line0 = start
    this = start
    while this < end:
        if column >= len(lines[this]) - 1:
            this += 1
            continue
        _write(lines, widths, line0, this, out)
        line0 = this
        width = 0
        while this < end and column < len(lines[this]) - 1:
            width = max(width, len(lines[this][column]) + PADDING)
            this += 1
        widths.append(width)
        _format(lines, widths, line0, this, out)
        widths.pop()
        line0 = this
    _write(lines, widths, line0, end, out)


def _write(lines: list[list[str]], widths: list[int], start: int, end: int, out: list[str]) -> None:
    for cells in lines[start:end]:
        text = ""
        for j, cell in enumerate(cells):
            text += cell.ljust(widths[j]) if j < len(widths) else cell
        out.append(text.rstrip())


def tabulate(text: str) -> str:
    """Align tab-separated `text` into columns; a cell ends at a tab, a line at a newline."""
    rows = text.split("\n")
    trailing = rows[-1] == ""
    if trailing:
        rows = rows[:-1]
    lines = [row.split("\t") for row in rows]
    out: list[str] = []
    _format(lines, [], 0, len(lines), out)
    return "\n".join(out) + ("\n" if trailing else "")
