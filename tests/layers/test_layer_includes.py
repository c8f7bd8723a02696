"""The include side of the layers (cmake/layers.cmake): every #include "<dir>/..." (or public
header megatron/...) in src/ and include/ must name the file's own layer or one it may call
(its DEPS, and theirs). The link checks (build/layers/layer_check_<name>) catch calls; this
catches what never reaches the linker: a struct or enum taken from a higher layer's header (as
the checkpoint format code once took struct mc_args from training/args.h). The table is the one
the build uses, written by CMake to build/layers/layers.json."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from mc_test import BUILD, SRC, check, summary  # noqa: E402

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def allowed(table, layer):
    """The layer and every layer below it (the closure of DEPS)."""
    seen, todo = set(), [layer]
    while todo:
        x = todo.pop()
        if x not in seen:
            seen.add(x)
            todo.extend(table[x]["deps"])
    return seen


def main():
    with open(os.path.join(BUILD, "layers", "layers.json")) as f:
        table = json.load(f)
    by_dir = {d: name for name, t in table.items() for d in t["dirs"]}
    by_header = {h: name for name, t in table.items() for h in t["headers"]}

    def layer_of_include(h):
        if h in by_header:
            return by_header[h]
        return by_dir.get(h.split("/")[0]) if "/" in h else None

    files = []
    for top in ("src", "include"):
        for dp, _, fs in os.walk(os.path.join(SRC, top)):
            files += [os.path.join(dp, f) for f in fs if f.endswith((".c", ".h"))]
    check(len(files) > 100, f"found {len(files)} source files under {SRC}/src and include")
    unowned, wrong = [], []
    for p in sorted(files):
        rel = os.path.relpath(p, SRC)
        parts = rel.split(os.sep)
        owner = (by_dir.get(parts[1]) if parts[0] == "src"
                 else by_header.get("/".join(parts[1:])))
        if owner is None:
            unowned.append(rel)
            continue
        ok = allowed(table, owner)
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in INCLUDE.finditer(text):
            target = layer_of_include(m.group(1))
            if target is not None and target not in ok:
                line = text.count("\n", 0, m.start()) + 1
                wrong.append(f"{rel}:{line}: #include \"{m.group(1)}\": layer {owner} may not "
                             f"use layer {target} (cmake/layers.cmake)")
    check(not unowned, "files in no layer (give their directory or header a layer in "
                       "cmake/layers.cmake): " + ", ".join(unowned))
    for w in wrong:
        print(w)
    check(not wrong, f"{len(wrong)} upward include(s)")
    return summary("test_layer_includes", f"({len(files)} files)")


if __name__ == "__main__":
    sys.exit(main())
