"""MkDocs hook of the documentation site (mkdocs.yml): the generated command reference, and links to
the repository's own files outside docs/.

The pages link result files, benchmarks and figures by their path in the repository (`../results/...`),
which reads well on a code host but is outside MkDocs' docs_dir. Each such link is checked here: one
that leaves the repository, or names a file the repository does not have, is a warning (an error
under `mkdocs build --strict`). An image is copied into the site under `repo/`; any other link becomes
its path as code, since the site does not carry the result files.
Text that points at documents outside the repository (the seed files, their checklist) is refused too:
papers are cited by authors and year (references.md).
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.plugins.bufsize_site")

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".pdf")
# Documents that live beside the repository, not in it: a reader of the site cannot open them.
OUTSIDE = re.compile(r"\bseeds? 0\d\d\b|seeds[- ]checklist|shared/(?:seeds|notes|reference)\b", re.IGNORECASE)


def outside_docs(page_src: str, target: str) -> Path | None:
    """The repository path a relative link of a page resolves to, where that is outside docs/."""
    if re.match(r"^[a-z]+:|^#|^/", target):
        return None
    path = (DOCS / page_src).parent / target.split("#")[0]
    resolved = path.resolve()
    return None if resolved.is_relative_to(DOCS) else resolved


def repo_links(page_src: str, markdown: str) -> list[tuple[re.Match, Path, int]]:
    """The links of a page (outside fenced code) that leave docs/, with where they land."""
    found, fenced = [], False
    offset = 0
    for line in markdown.splitlines(keepends=True):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            for m in LINK.finditer(line):
                dest = outside_docs(page_src, m.group(3))
                if dest is not None:
                    found.append((m, dest, offset))
        offset += len(line)
    return found


def on_files(files: Files, config) -> Files:  # noqa: ANN001 (MkDocsConfig)
    """Add the command reference, generated from the parser, and the repository images pages show."""
    sys.path.insert(0, str(REPO))
    from bufsize.cli.reference import command_reference

    files.append(File.generated(config, "reference.md", content=command_reference()))
    wanted: set[Path] = set()
    for f in list(files.documentation_pages()):
        if f.abs_src_path is None:
            continue
        for m, dest, _ in repo_links(f.src_uri, Path(f.abs_src_path).read_text()):
            if m.group(1) and dest.suffix in IMAGE_SUFFIXES and dest.is_file() and dest.is_relative_to(REPO):
                wanted.add(dest)
    for dest in sorted(wanted):
        files.append(File.generated(config, f"repo/{dest.relative_to(REPO).as_posix()}", abs_src_path=str(dest)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 (mkdocs objects)
    src = page.file.src_uri
    for m in OUTSIDE.finditer(markdown):
        log.warning(f"{src}: '{m.group(0)}' names a document outside the repository; cite the paper instead")
    out, last = [], 0
    for m, dest, offset in repo_links(src, markdown):
        start, end = offset + m.start(), offset + m.end()
        if not dest.is_relative_to(REPO):
            log.warning(f"{src}: link to {m.group(3)} leaves the repository")
            continue
        if not dest.exists():
            log.warning(f"{src}: link to {m.group(3)}: the repository has no {dest.relative_to(REPO)}")
            continue
        rel = dest.relative_to(REPO).as_posix()
        out.append(markdown[last:start])
        if m.group(1):  # an image, copied into the site by on_files
            up = "../" * src.count("/")
            out.append(f"![{m.group(2)}]({up}repo/{rel})")
        else:
            text = m.group(2)
            out.append(text if text.strip("`") == rel else f"{text} (`{rel}`)")
        last = end
    out.append(markdown[last:])
    return "".join(out)
