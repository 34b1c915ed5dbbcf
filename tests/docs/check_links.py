"""Every relative link in README.md, CHANGELOG.md and docs/ resolves.

A link to a file must name one in the repository (and stay inside it); a
link with an anchor must name a heading of that file, slugged as GitHub
slugs them. Links to other sites are not fetched: CI reaches registries
only. Exits 1 listing each broken link with its file and line.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation
    dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_code(path: Path):
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def anchors(path: Path) -> set:
    seen, found = {}, set()
    for _, line in lines_outside_code(path):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    # Explicit anchors (<a id="..."> / name=).
    for found_id in re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", path.read_text(encoding="utf-8")):
        found.add(found_id)
    return found


def broken_links(files):
    cache = {}
    for path in files:
        for number, line in lines_outside_code(path):
            inline = re.sub(r"`[^`]*`", "", line)
            for target in LINK.findall(inline):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # another site, mailto: and the like
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                where = f"{path.relative_to(ROOT)}:{number}: {target}"
                if ROOT not in dest.parents and dest != ROOT:
                    yield f"{where} (outside the repository)"
                elif not dest.exists():
                    yield f"{where} (no such file)"
                elif anchor and dest.suffix == ".md":
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if anchor not in cache[dest]:
                        yield f"{where} (no heading #{anchor} in {dest.relative_to(ROOT)})"


def self_test():
    """The checker finds what it exists to find (run before every check)."""
    assert slug("Moving a 0.17.0 Python stack over, and back") == "moving-a-0170-python-stack-over-and-back"
    assert slug("`aggregator poll`: the local poller") == "aggregator-poll-the-local-poller"
    work = ROOT / ".work" / "link-self-test"
    work.mkdir(parents=True, exist_ok=True)
    page = work / "page.md"
    page.write_text(
        "# Title\n## Same\n## Same\n"
        "[ok](#same-1) [ok](page.md#title) [bad](#nowhere) [bad](gone.md)\n"
        "[bad](../../../../outside.md) `[code](gone.md)` [web](https://example.com/x)\n"
        "```\n[fenced](gone.md)\n```\n",
        encoding="utf-8",
    )
    found = [line.split(": ", 1)[1] for line in broken_links([page])]
    assert found == [
        "#nowhere (no heading #nowhere in .work/link-self-test/page.md)",
        "gone.md (no such file)",
        "../../../../outside.md (outside the repository)",
    ], found


def main(argv):
    self_test()
    files = [Path(a).resolve() for a in argv] or sorted(
        [ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")]
    )
    broken = list(broken_links(files))
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    if broken:
        return 1
    print(f"links: {len(files)} files checked, every relative link and anchor resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
