"""Design notes: every ``NOTE [ Title ]`` a comment, docstring or document points to exists, in the file named."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "speechiter"
# a note: its title first on a line, alone or before a colon (or anywhere before a colon); else a pointer
DEFINITION = re.compile(r"(?:^[ \t]*(?:#[ \t]*)?NOTE \[ ([^\]\n]+?) \](?=:|[ \t]*$)"
                        r"|(?<![Ss]ee )NOTE \[ ([^\]\n]+?) \]:)", re.MULTILINE)
POINTER = re.compile(r"NOTE \[ ([^\]]+?) \](?: in `?([\w./]+\.py))?")


def flat(text: str) -> str:
    """``text`` with its line breaks (and the comment marks after them) as single spaces."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#[ \t]*)?", " ", text)


def notes():
    """``{title: file}`` of every design note in the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        for title in (first or second for first, second in DEFINITION.findall(path.read_text())):
            assert title not in found, f"NOTE [ {title} ] is in {found.get(title)} and {path}"
            found[title] = path
    return found


def points_at(pointer: Path, named: str, note: Path) -> bool:
    """Whether ``named`` (as written beside the pointer in ``pointer``) is the file ``note``."""
    candidates = [REPO / named, PACKAGE / named, pointer.parent / named, pointer.parent.parent / named]
    return any(candidate.resolve() == note.resolve() for candidate in candidates)


def test_every_note_pointer_names_a_note_where_it_is():
    defined = notes()
    sources = list(PACKAGE.rglob("*.py")) + [REPO / "handbook.md", REPO / "README.md"]
    wrong = []
    for path in sources:
        for title, named in POINTER.findall(flat(path.read_text())):
            if title == "...":  # the form itself, in the docs
                continue
            if title not in defined:
                wrong.append(f"{path.relative_to(REPO)}: NOTE [ {title} ] is nowhere")
            elif named and not points_at(path, named, defined[title]):
                wrong.append(f"{path.relative_to(REPO)}: NOTE [ {title} ] is in "
                             f"{defined[title].relative_to(REPO)}, not {named}")
    assert not wrong, "\n".join(wrong)


def test_the_architecture_section_names_each_note_with_its_file():
    """``[ Title ]`` ... in ``path``: the handbook's list of design notes, each in the file it names."""
    defined = notes()
    text = flat((REPO / "handbook.md").read_text())
    listing = text.split("Design notes (`NOTE [ ... ]` blocks) sit beside the code they explain:", 1)[1]
    listing = listing.split("Every `NOTE", 1)[0]
    parts = re.split(r" in `([\w/.]+\.py)`", listing)
    wrong = []
    for chunk, named in zip(parts[::2], parts[1::2]):
        for title in re.findall(r"`\[ ([^\]]+?) \]`", chunk):
            if title not in defined or not points_at(PACKAGE / "x.py", named, defined[title]):
                wrong.append(f"[ {title} ] is not in {named}")
    assert len(parts) > 20 and not wrong, wrong
