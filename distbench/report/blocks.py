"""The report's blocks: the plain data `build_report` (model.py) produces and the HTML template and the Markdown
renderer (render.py) both walk. Every string in them is plain text, escaped only by the renderers."""

from __future__ import annotations

from dataclasses import dataclass, field


# -- the blocks (the template dispatches on `kind`: the class name in lower case)
class Block:
    @property
    def kind(self) -> str:
        return type(self).__name__.lower()


@dataclass
class Plot:
    name: str
    title: str
    svg: bytes
    png: bytes
    caption: str = ""
    section: str = ""  # the id of the section it belongs to, where no section builder places it by name


@dataclass
class Text(Block):
    text: str
    style: str = ""  # "" (a paragraph), "muted" (definitions and asides) or "callout"
    lead: str = ""  # bold words before the text


@dataclass
class Bullets(Block):
    items: list[str]


@dataclass
class Heading(Block):
    text: str


@dataclass
class Table(Block):
    headers: list[str]
    rows: list[list[str]]
    row_classes: list[str] = field(default_factory=list)  # "bad": a point that produced no measurement
    numeric: bool = True  # right-align the cells that read as numbers


@dataclass
class Figure(Block):
    plot: Plot


@dataclass
class Grid(Block):
    figures: list[Figure]


@dataclass
class Details(Block):
    """Verbatim text folded away (a failed point's stderr tail); the HTML page only."""

    summary: str
    text: str


@dataclass
class Section:
    id: str
    nav: str  # the link text in the page's navigation
    blocks: list
    title: str = ""  # the heading; the nav text when not given

    def __post_init__(self):
        self.title = self.title or self.nav


@dataclass
class Report:
    sweep_id: str
    when: str  # see sweep_when
    command: str
    store_path: str
    callout: Text | None
    sections: list[Section]
    plots: list[Plot]
