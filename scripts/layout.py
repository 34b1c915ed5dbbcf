#!/usr/bin/env python3
"""The layout's rules, measured: lines per crate, functions by length, and
import circles between a crate's modules.

    scripts/layout.py            # report
    scripts/layout.py --self-test  # the check finds what it is for
    scripts/layout.py --check    # exit 1 on a function over 100 lines, a circle,
                                 # a dependency between our crates outside ALLOWED,
                                 # I/O in a PURE crate outside its allowed modules,
                                 # or a module its lib.rs doc comment does not name

A circle is two modules of one crate that use each other, directly or
through others (a module and its own ancestors or descendants do not count:
a child using its parent's items is how Rust nests). Test modules
(`tests.rs`, `tests/`) and examples are left out of both rules. The parse is
lexical (comments and string literals blanked, braces matched), which is
enough for this tree's code; it is not a Rust parser.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FN_LINES = 100

# What each crate may depend on among ours (docs/architecture.md#the-crates).
ALLOWED = {
    "zae-table": set(),
    "zae-runtime": {"zae-table"},
    "zae-adaptive": {"zae-table"},
    "zae-aggregator": {"zae-table", "zae-runtime", "zae-adaptive"},
    "zae-provisioner": {"zae-table", "zae-runtime", "zae-adaptive"},
    "cfn-limits-resource": {"zae-provisioner", "zae-table", "zae-runtime"},
    "zae-limits": {"zae-provisioner", "zae-adaptive", "zae-table", "zae-runtime"},
    "zae-client": {"zae-table", "zae-runtime"},
    "zae-test-support": {"zae-table"},
}
# Crates whose logic is pure, and the modules of theirs that may do I/O:
# zae-adaptive decides how a limit moves without a table; only its stamping
# lap and its reset read and write.
PURE = {"adaptive": {"pass", "reset"}}
IO = re.compile(r"\basync\b|\.await\b|\bStore\b|\bzae_table::store\b")
# Products: nothing depends on them, not even a test (they meet as binaries).
PRODUCTS = {"zae-aggregator", "cfn-limits-resource", "zae-limits"}
FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def members(root: Path):
    text = (root / "Cargo.toml").read_text()
    listed = re.search(r"members\s*=\s*\[([^\]]*)\]", text).group(1)
    return [m.strip().strip('"') for m in listed.split(",") if m.strip()]


def is_test(path: Path) -> bool:
    return path.name == "tests.rs" or "tests" in path.parts[:-1]


def blank(source: str) -> str:
    """Comments, strings and char literals replaced by spaces, lines kept."""
    out, i, n = [], 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", source[i:j]))
            i = j
        elif m := re.match(r'r(#*)"', source[i:i + 10]) if c == "r" and (i == 0 or not (source[i - 1].isalnum() or source[i - 1] == "_")) else None:
            end = '"' + m.group(1)
            j = source.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", source[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and source[j] != '"':
                j += 2 if source[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", source[i:j + 1]))
            i = j + 1
        elif c == "'" and (m := re.match(r"'(\\.[^']*|[^\\'])'", source[i:i + 12])):
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def without_test_modules(text: str) -> str:
    """`#[cfg(test)] mod x { ... }` blanked (lines kept): tests, not layout."""
    lines = text.split("\n")
    k = 0
    while k < len(lines):
        if lines[k].strip() == "#[cfg(test)]" and k + 1 < len(lines) and re.match(r"\s*(pub\s+)?mod\s+\w+\s*\{", lines[k + 1]):
            depth, j = 0, k + 1
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                lines[j] = ""
                if depth <= 0:
                    break
                j += 1
            k = j
        k += 1
    return "\n".join(lines)


def source(path: Path) -> str:
    return without_test_modules(blank(path.read_text()))


def test_lines(path: Path) -> int:
    """Non-blank lines of a file's inline test modules."""
    text = blank(path.read_text())
    kept = without_test_modules(text)
    return sum(1 for a, b in zip(text.split("\n"), kept.split("\n")) if a.strip() and not b.strip())


def functions(path: Path):
    """(name, first line, length in lines) of every fn with a body."""
    lines = source(path).split("\n")
    found = []
    for k, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth, started = 0, False
        for j in range(k, len(lines)):
            for ch in lines[j]:
                if ch == ";" and not started and depth == 0:
                    break  # a declaration without a body
                if ch == "{":
                    depth += 1
                    started = True
                elif ch == "}":
                    depth -= 1
            else:
                if started and depth <= 0:
                    found.append((m.group(1), k + 1, j - k + 1))
                    break
                continue
            break
    return found


def module_of(src: Path, path: Path):
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts in (["lib"], ["main"]):
        return ()
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


USE_GROUP = re.compile(r"\buse\s+((?:crate|super|self)(?:::\w+)*)::\{([^;]*)\}\s*;", re.S)
PATH = re.compile(r"\b((?:crate|super|self)(?:::(?:super|\w+))+)")


def references(text: str):
    """Every `crate::`/`super::`/`self::` path, use groups expanded a level."""
    paths = []
    for m in USE_GROUP.finditer(text):
        base = m.group(1)
        for item in re.split(r",(?![^{]*\})", m.group(2)):
            item = item.strip().split(" as ")[0].strip()
            if item and item != "self":
                paths.append(base + "::" + re.sub(r"\s+", "", item).split("::{")[0])
            elif item == "self":
                paths.append(base)
    text = USE_GROUP.sub(" ", text)
    paths += [m.group(1) for m in PATH.finditer(text)]
    return paths


def resolve(path: str, here: tuple, modules: set):
    parts = path.split("::")
    # `super` and `self` of a file module `a/b.rs` count from `a::b`.
    base = list(here)
    if parts[0] == "crate":
        base, parts = [], parts[1:]
    elif parts[0] == "self":
        parts = parts[1:]
    while parts and parts[0] == "super":
        base = base[:-1]
        parts = parts[1:]
    full = tuple(base + parts)
    for k in range(len(full), -1, -1):
        if full[:k] in modules:
            return full[:k]
    return ()


def circles(src: Path):
    files = {module_of(src, p): p for p in src.rglob("*.rs")
             if not is_test(p.relative_to(src)) and "bin" not in p.relative_to(src).parts[:-1]
             and p.relative_to(src) != Path("main.rs")}  # a binary's root, not the library's
    modules = set(files)
    edges = {m: set() for m in modules}
    for mod, path in files.items():
        text = source(path)
        for ref in references(text):
            target = resolve(ref, mod, modules)
            related = target[:len(mod)] == mod or mod[:len(target)] == target
            if not related:
                edges[mod].add(target)
    return [c for c in strongly_connected(edges) if len(c) > 1]


def strongly_connected(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def dependencies(root: Path, member: str):
    """(package, {section: [our crates]}) from a member's Cargo.toml."""
    text = (root / member / "Cargo.toml").read_text()
    package = re.search(r'^name\s*=\s*"([^"]+)"', text, re.M).group(1)
    ours = set(ALLOWED) | PRODUCTS
    found, section = {}, None
    for line in text.split("\n"):
        if m := re.match(r"\[([^\]]+)\]", line.strip()):
            section = m.group(1)
            continue
        if m := re.match(r"([\w-]+)(?:\.workspace)?\s*=", line.strip()):
            if m.group(1) in ours and section and section.endswith("dependencies"):
                found.setdefault(section, []).append(m.group(1))
    return package, found


def import_problems(root: Path, member: str):
    package, found = dependencies(root, member)
    problems = []
    allowed = ALLOWED.get(package)
    if allowed is None:
        return [f"{member}: package {package} is not in scripts/layout.py's ALLOWED"]
    for section, crates in found.items():
        for crate in crates:
            if crate == package:
                continue  # a crate's tests turning on a feature of its own
            if crate in PRODUCTS:
                problems.append(f"{package} [{section}] depends on the product {crate}")
            elif section == "dependencies" and crate not in allowed:
                problems.append(f"{package} depends on {crate} (allowed: {sorted(allowed) or 'none'})")
    return problems


def io_problems(src: Path, member: str):
    """Modules of a pure crate that do I/O, outside the ones allowed to."""
    allowed = PURE.get(member)
    if allowed is None:
        return []
    found = []
    for p in sorted(src.rglob("*.rs")):
        rel = p.relative_to(src)
        if is_test(rel) or (mod := module_of(src, p)) and mod[0] in allowed:
            continue
        if IO.search(source(p)):
            found.append(f"{member}/src/{rel} does I/O (only {sorted(allowed)} may)")
    return found


def unmapped(root: Path, member: str):
    """Modules a crate's `lib.rs` declares and its doc comment never names."""
    lib = root / member / "src" / "lib.rs"
    if not (root / member / "src").is_dir():
        lib = root / member / "lib.rs"
    if not lib.is_file():
        return []
    text = lib.read_text()
    doc = "\n".join(l for l in text.split("\n") if l.startswith("//!"))
    declared = re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text, re.M)
    return [f"{member}/{lib.relative_to(root / member)} does not name module `{m}` in its doc comment"
            for m in declared if not re.search(r"`\[?" + m + r"\b", doc)]


def name(crate, mod):
    return crate + ("::" + "::".join(mod) if mod else "")


def measure(root: Path, out=print):
    """(functions over the bound, circles, import problems), reported."""
    total, long_fns, all_circles, imports = 0, [], [], []
    out(f"{'crate':<28}{'lines':>8}{'of them tests':>15}")
    for member in members(root):
        src = root / member / "src"
        if not src.is_dir():
            imports += unmapped(root, member)
            continue
        lines = tests = 0
        for p in sorted(src.rglob("*.rs")):
            n = p.read_text().count("\n")
            rel = p.relative_to(src)
            lines += n
            if is_test(rel):
                tests += n
                continue
            tests += test_lines(p)
            long_fns += [(n_, f"{member}/src/{rel}", l, name_) for name_, l, n_ in functions(p)]
        total += lines - tests
        out(f"{member:<28}{lines:>8}{tests:>15}")
        imports += import_problems(root, member) + io_problems(src, member) + unmapped(root, member)
        found = circles(src)
        all_circles += [[name(member, m) for m in c] for c in found]
    out(f"{'outside tests':<28}{total:>8}")
    long_fns.sort(reverse=True)
    out("\nlongest functions (lines):")
    for n, f, l, fn in long_fns[:12]:
        out(f"  {n:>4}  {f}:{l} {fn}")
    over = [x for x in long_fns if x[0] > MAX_FN_LINES]
    out(f"\nfunctions over {MAX_FN_LINES} lines: {len(over)}; over 80: "
          f"{len([x for x in long_fns if x[0] > 80])}")
    out(f"import circles: {len(all_circles)}")
    for c in all_circles:
        out("  " + " <-> ".join(c))
    out(f"crate imports, I/O and module maps outside the rules: {len(imports)}")
    for problem in imports:
        out("  " + problem)
    return over, all_circles, imports


def self_test():
    """The check finds each kind of break in a tree made to have one."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "Cargo.toml").write_text('[workspace]\nmembers = ["table", "client", "adaptive"]\n')
        files = {
            "table/Cargo.toml": '[package]\nname = "zae-table"\n[dependencies]\nzae-client.workspace = true\n',
            "table/src/lib.rs": "//! The model: [`a`] and [`b`].\npub mod a;\npub mod b;\n",
            "table/src/a.rs": "use crate::b::B;\npub struct A;\n",
            "table/src/b.rs": "pub struct B;\npub fn f() -> crate::a::A { crate::a::A }\n",
            "client/Cargo.toml": '[package]\nname = "zae-client"\n[dependencies]\nzae-table.workspace = true\n',
            "client/src/lib.rs": "//! Its `parent`.\npub mod parent;\n",
            "adaptive/Cargo.toml": '[package]\nname = "zae-adaptive"\n',
            "adaptive/src/lib.rs": "//! The law ([`law`]).\npub mod law;\npub mod pass;\n",
            "adaptive/src/law.rs": "pub async fn factor() {}\n",
            "adaptive/src/pass.rs": "pub async fn run() {}\n",
            "client/src/parent/mod.rs": "pub mod child;\nuse child::C;\n",
            "client/src/parent/child.rs": "pub struct C;\nuse super::helper;\n"
            + "pub fn long() {\n" + "    let _ = \"}\";\n" * 101 + "}\n",
        }
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        over, circles_found, imports = measure(root, out=lambda *a, **k: None)
        assert [f[3] for f in over] == ["long"], over
        assert circles_found == [["table::a", "table::b"]], circles_found
        assert len(imports) == 3 and "zae-table depends on zae-client" in imports[0], imports
        assert "adaptive/src/law.rs does I/O" in imports[1], imports
        assert "does not name module `pass`" in imports[2], imports
    print("layout.py self-test: a long function, a circle, a forbidden import, I/O in pure"
          " code and a module lib.rs does not name are each found")


def main():
    if "--self-test" in sys.argv:
        self_test()
        return 0
    over, all_circles, imports = measure(ROOT)
    if "--check" in sys.argv and (over or all_circles or imports):
        print("layout.py: the layout's rules are broken (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
