"""Manual pages (roff with the man(7) or mdoc(7) macros) as plain text: one line of text per line
of the source, sections as headings, the `.TH` (or `.Dt`) title, no macros or escapes left."""

from __future__ import annotations

import re
import shlex

from psirag_kb.ingest.context import Heading

_GLYPHS: dict[str, str] = {
    "em": "\u2014", "en": "\u2013", "hy": "-", "mi": "-", "aq": "'", "dq": '"', "lq": "\u201c",
    "rq": "\u201d", "oq": "\u2018", "cq": "\u2019", "bu": "\u2022", "co": "\u00a9",
    "rg": "\u00ae", "tm": "\u2122", "ga": "`", "ti": "~", "ha": "^", "pl": "+", "mu": "\u00d7",
    "di": "\u00f7", "eq": "=", ">=": "\u2265", "<=": "\u2264", "!=": "\u2260", "->": "\u2192",
    "<-": "\u2190", "de": "\u00b0", "sc": "\u00a7", "ps": "\u00b6", "bv": "|", "ba": "|",
    "or": "|", "rs": "\\", "sl": "/", "dg": "\u2020", "fm": "\u2032", "ct": "\u00a2",
    "Aq": "'", "Lq": "\u201c", "Rq": "\u201d", "R": "\u00ae", "Tm": "\u2122", "lh": "\u261c",
    "rh": "\u261e", "ss": "\u00df", "a'": "\u00e1", "e'": "\u00e9", "u:": "\u00fc",
    "o:": "\u00f6", "a:": "\u00e4", "'e": "\u00e9", "`e": "\u00e8",
}
_SIMPLE = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "&": "", "|": "",
           "^": "", "c": "", "%": "", "/": "", ",": "", ":": "", "{": "", "}": "", "t": "\t",
           "'": "'", "`": "`", ".": ".", "u": "", "d": "", "r": "", "p": "", "a": "", "!": ""}
_ESCAPE = re.compile(
    r"""\\(?:
        (?P<font>[fF](?:\[[^\]]*\]|\(..|.))
      | (?P<size>s(?:[-+]?\d{1,2}|[-+]?\(\d\d|\[[^\]]*\]|'[^']*'))
      | (?P<glyph>\((?P<two>..)|\[(?P<long>[^\]]*)\])
      | (?P<string>\*(?:\[(?P<slong>[^\]]*)\]|\((?P<stwo>..)|(?P<sone>.)))
      | (?P<reg>[nkgmMYV](?:\[[^\]]*\]|\(..|[-+]?.))
      | (?P<quoted>[hvwoblLxXZDRNSAB]'[^']*')
      | (?P<char>.)
    )""",
    re.VERBOSE,
)
_COMMENT = re.compile(r'\\["#].*$')
_ALTERNATING = {"BR", "RB", "BI", "IB", "IR", "RI"}
_FONT_MACROS = {"B", "I", "SM", "SB", "R"}
_SECTION = {"SH": 1, "Sh": 1, "SS": 2, "Ss": 2}
_SKIP_BLOCKS = {"de": "..", "de1": "..", "am": "..", "ig": "..", "ds1": ""}
_MDOC_DROP = {
    "Pp", "Lp", "Bl", "El", "Bd", "Ed", "Os", "Dd", "Ns", "Sm", "Bk", "Ek", "Pc", "Po",
    "Pq", "Li", "Ar", "Cm", "Ic", "Ev", "Pa", "Va", "Em", "Sy", "Ql", "Dq", "Sq", "Qq",
    "Dv", "Er", "Fn", "Fa", "Ft", "Fd", "In", "Ta", "It", "Ad", "An", "Aq", "Bq", "Brq",
    "Cd", "Lk", "Mt", "Ms", "No", "Tn", "Ux", "At", "Bx", "Nx", "Fx", "Ox", "Dx", "Bsx",
    "St", "Rv", "Ex", "Xo", "Xc", "Oo", "Oc", "D1", "Dl", "Eo", "Ec", "Do", "Dc", "Qo",
    "Qc", "So", "Sc", "Bo", "Bc", "Ao", "Ac", "Ud", "Lb", "Vt", "Ot", "Fo", "Fc", "Ap",
    "Hf", "Sx", "Tg",
}
_MDOC_SILENT = {"Dd", "Os", "Sm", "Bl", "El", "Bd", "Ed", "Bk", "Ek", "Pp", "Lp", "Xo", "Xc"}
_MDOC_WRAP = {"Op": ("[", "]"), "Oo": ("[", ""), "Oc": ("", "]"), "Dq": ("\u201c", "\u201d"),
              "Sq": ("\u2018", "\u2019"), "Qq": ('"', '"'), "Pq": ("(", ")"), "Bq": ("[", "]"),
              "Aq": ("<", ">"), "Brq": ("{", "}")}


def man_text(source: str) -> tuple[str, str, tuple[Heading, ...]]:
    """The text of a manual page's roff source (line N of the text is line N of the source),
    its title (`LS(1)` from `.TH LS 1`, or mdoc's `.Dt`) and its section headings."""
    out: list[str] = []
    headings: list[Heading] = []
    title = ""
    end_block: str | None = None
    heading_next = 0
    table = ""
    mdoc_name = ""
    for number, line in enumerate(source.split("\n"), start=1):
        text = ""
        if end_block is not None:
            if line.strip() == end_block:
                end_block = None
            out.append("")
            continue
        if table == "format":
            table = "data" if line.rstrip().endswith(".") else "format"
            out.append("")
            continue
        if line.startswith((".", "'")):
            name, args = _request(line)
            if name in _SKIP_BLOCKS:
                end_block = ".." if name != "ds1" else None
                out.append("")
                continue
            if name == "TS":
                table = "options"
            elif name == "TE":
                table = ""
            elif name in ("TH", "Dt") and not title and args:
                title = f"{args[0]}({args[1]})" if len(args) > 1 else args[0]
            elif name in _SECTION:
                if args:
                    text = _escapes(" ".join(args))
                    headings.append(Heading(number, _SECTION[name], text))
                else:
                    heading_next = _SECTION[name]
            elif name == "Nm":
                mdoc_name = mdoc_name or (args[0] if args else "")
                text = _escapes(_mdoc(args) if args else mdoc_name)
            else:
                text = _macro_text(name, args)
        else:
            if table == "options" and line.rstrip().endswith(";"):
                out.append("")
                table = "format"
                continue
            if table == "options":
                table = "format" if not line.rstrip().endswith(".") else "data"
                out.append("")
                continue
            if table == "data":
                line = line.replace("T{", "").replace("T}", "").replace("\t", "  ")
            text = _escapes(_COMMENT.sub("", line))
            if heading_next and text.strip():
                headings.append(Heading(number, heading_next, text.strip()))
                heading_next = 0
        out.append(text.rstrip())
    return "\n".join(out), _escapes(title), tuple(headings)


def _request(line: str) -> tuple[str, list[str]]:
    """A control line's macro name and its arguments (quotes and comments handled)."""
    body = _COMMENT.sub("", line[1:]).strip()
    if not body:
        return "", []
    name, _, rest = body.partition(" ")
    try:
        args = shlex.split(rest.replace("\\\"", "\x00"), posix=True)
    except ValueError:  # an unbalanced quote: words as they stand
        args = rest.split()
    return name.strip(), [a.replace("\x00", '"') for a in args]


def _macro_text(name: str, args: list[str]) -> str:
    """What a macro line shows as text (nothing for layout requests)."""
    if name in _ALTERNATING:
        return _escapes("".join(args))
    if name in _FONT_MACROS or name in ("IP", "TQ", "UR", "MT", "SY", "Nd", "Nm", "Xr", "Fl",
                                        "Op", "D1", "Dl", "It", "Dq", "Sq", "Ql", "Pa"):
        if name == "IP":
            args = args[:1]
        if name == "Nd":
            return "\u2014 " + _escapes(_mdoc(args))
        if name in ("Xr", "Fl", "Op", "Dq", "Sq"):
            return _escapes(_mdoc([name, *args]))
        return _escapes(_mdoc(args) if name[0].isupper() and name[1:2].islower() else
                        " ".join(args))
    if name in _MDOC_SILENT:
        return ""
    if name == "OP":
        return _escapes("[" + " ".join(args) + "]")
    if name and name[0].isupper() and name[1:2].islower() and name not in _MDOC_DROP:
        return ""
    if name in _MDOC_DROP and args:
        return _escapes(_mdoc(args))
    return ""


def _mdoc(tokens: list[str]) -> str:
    """The text of mdoc tokens: callable macros inside a line become their text."""
    words: list[str] = []
    closing: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "Fl":
            following = tokens[i + 1] if i + 1 < len(tokens) else ""
            if following and following not in _MDOC_DROP and following not in _MDOC_WRAP:
                words.append("-" + following)
                i += 2
            else:
                words.append("-")
                i += 1
            continue
        if token == "Xr" and i + 2 < len(tokens) + 0 and i + 1 < len(tokens):
            section = tokens[i + 2] if i + 2 < len(tokens) else ""
            words.append(f"{tokens[i + 1]}({section})" if section else tokens[i + 1])
            i += 3
            continue
        if token in _MDOC_WRAP:
            opening, close = _MDOC_WRAP[token]
            words.append(opening)
            closing.append(close)
        elif token in _MDOC_DROP or token == "Nm":
            pass
        else:
            words.append(token)
        i += 1
    text = " ".join(w for w in words if w)
    for close in reversed(closing):
        text += close
    return re.sub(r"([\[(\u201c\u2018<{]) ", r"\1", text)


def _escapes(text: str) -> str:
    """Replace roff escapes with the characters they stand for, drop font and size changes."""
    if "\\" not in text:
        return text
    return _ESCAPE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    """The replacement of one roff escape."""
    if match.group("font") or match.group("size") or match.group("reg") or match.group("quoted"):
        quoted = match.group("quoted")
        if quoted and quoted[0] == "N":
            number = quoted[2:-1]
            return chr(int(number)) if number.isdigit() and int(number) < 0x110000 else ""
        return ""
    if match.group("glyph"):
        name = match.group("two") or match.group("long") or ""
        if name.startswith("u") and len(name) > 1:
            try:
                return chr(int(name[1:].split("_")[0], 16))
            except ValueError:
                return ""
        return _GLYPHS.get(name, "")
    if match.group("string"):
        name = match.group("slong") or match.group("stwo") or match.group("sone") or ""
        return _GLYPHS.get(name, "")
    char = match.group("char")
    return _SIMPLE.get(char, char)
